//! Late interaction (ColBERT-style multi-vector embeddings) at the SQL edge: [`Matrix`], the
//! 2-D `real[]` of a multi-vector embedding (a row per token), and `embed.maxsim`, the exact
//! MaxSim score of two of them (`pg_embed_core::maxsim`), for `real[]` and for arrays of
//! pgvector's `vector`.
//!
//! A `real[]` is read as a matrix this way: a 2-D array is rows x columns; a 1-D array of n
//! values is one row of n (a single vector); the empty array `'{}'` is 0 rows. More than 2
//! dimensions is an error (2202E array_subscript_error), and so is a NULL element (22004
//! null_value_not_allowed); each names the dimensions or the element's subscripts. A matrix
//! of 0 rows (or 0 columns) is written back as `'{}'`.
//!
//! The `vector[]` form does not make pg_embed depend on pgvector: it is declared on
//! `anyarray`, and the element type is checked at run time (its name is `vector` and its
//! values have pgvector's layout); other element types are refused with 42804
//! datatype_mismatch.

use core::ffi::CStr;
use std::borrow::Cow;

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlArrayMappingRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;
use pgrx::AnyArray;

use crate::error::report as raise;

/// A matrix of float32 values, row-major: SQL's 2-D `real[]` (see the module's notes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Matrix {
    pub values: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

/// Token vectors as the 2-D array `embed_multi` returns.
impl From<pg_embed_core::late::MultiVector> for Matrix {
    fn from(m: pg_embed_core::late::MultiVector) -> Self {
        Matrix { values: m.values, rows: m.rows, cols: m.dim }
    }
}

/// The matrix of `rows`, one row each; they must all have the same length (a caller's bug,
/// raised as XX000, otherwise). No rows: a matrix of 0 rows. (The #[pg_test]s build theirs
/// with it.)
#[cfg(any(test, feature = "pg_test"))]
pub fn matrix_from_rows(rows: Vec<Vec<f32>>) -> Matrix {
    let cols = rows.first().map_or(0, Vec::len);
    if let Some((i, row)) = rows.iter().enumerate().find(|(_, r)| r.len() != cols) {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("rows of a matrix differ in length: row 1 has {cols} values, row {} has {}", i + 1, row.len()),
            None,
        );
    }
    let count = rows.len();
    Matrix { values: rows.concat(), rows: count, cols }
}

/// PostgreSQL's limits on an allocation and on the elements of an array (utils/memutils.h,
/// utils/array.h).
const MAX_ALLOC_SIZE: usize = 0x3fff_ffff;
const MAX_ARRAY_SIZE: usize = MAX_ALLOC_SIZE / std::mem::size_of::<pg_sys::Datum>();

/// What is wrong with an array read as a matrix.
enum ArrayIssue {
    /// Not a float4 array: the element type's name.
    NotReal(String),
    /// More than 2 dimensions: how many, and their bounds as array_dims writes them.
    TooManyDims(usize, String),
    /// A NULL element, at these subscripts (`[2][3]`).
    Null(String),
}

fn raise_issue(what: &str, issue: ArrayIssue) -> ! {
    use PgSqlErrorCode::*;
    match issue {
        ArrayIssue::NotReal(element) => {
            raise(ERRCODE_DATATYPE_MISMATCH, format!("{what} must be real[], not {element}[]"), None)
        }
        ArrayIssue::TooManyDims(n, bounds) => raise(
            ERRCODE_ARRAY_ELEMENT_ERROR, // 2202E array_subscript_error
            format!("{what} must have at most 2 dimensions, not {n} ({bounds})"),
            Some("A matrix is a 2-D array with a row per vector; a 1-D array is one row."),
        ),
        ArrayIssue::Null(at) => {
            raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, format!("{what} must not contain NULL (element {at})"), None)
        }
    }
}

/// The name of a type, as format_type_be writes it (`double precision`, `public.vector`).
fn type_name(oid: pg_sys::Oid) -> String {
    // SAFETY: format_type_be returns a palloc'd C string (or raises for a bad oid).
    unsafe { CStr::from_ptr(pg_sys::format_type_be(oid)).to_string_lossy().into_owned() }
}

/// A detoasted (flat) array: the fields of utils/array.h's macros.
struct FlatArray(*mut pg_sys::ArrayType);

impl FlatArray {
    /// # Safety
    /// `datum` is a non-NULL array datum (toasted, expanded or flat).
    unsafe fn new(datum: pg_sys::Datum) -> FlatArray {
        // SAFETY: an array is a varlena; pg_detoast_datum returns it flat (a palloc'd copy
        // when it was toasted, compressed, short-headed or expanded).
        FlatArray(unsafe { pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) }.cast())
    }

    /// ARR_NDIM
    fn ndim(&self) -> usize {
        // SAFETY: a flat array's header (`new`).
        unsafe { (*self.0).ndim.max(0) as usize }
    }

    /// ARR_ELEMTYPE
    fn elemtype(&self) -> pg_sys::Oid {
        // SAFETY: as `ndim`.
        unsafe { (*self.0).elemtype }
    }

    /// ARR_DIMS then ARR_LBOUND: the length and the lower bound of each dimension.
    fn dims(&self) -> (&[i32], &[i32]) {
        let n = self.ndim();
        // SAFETY: the dimensions then the lower bounds follow the header, n of each.
        unsafe {
            let dims = self.0.cast::<u8>().add(std::mem::size_of::<pg_sys::ArrayType>()).cast::<i32>();
            (std::slice::from_raw_parts(dims, n), std::slice::from_raw_parts(dims.add(n), n))
        }
    }

    /// ArrayGetNItems: the number of elements.
    fn len(&self) -> usize {
        let (dims, _) = self.dims();
        if dims.is_empty() {
            0
        } else {
            dims.iter().map(|&d| d.max(0) as usize).product()
        }
    }

    /// ARR_NULLBITMAP (a set bit is a non-NULL element), when the array may hold NULLs.
    fn null_bitmap(&self) -> Option<&[u8]> {
        // SAFETY: ARR_HASNULL is a non-zero dataoffset; the bitmap follows the bounds.
        unsafe {
            if (*self.0).dataoffset == 0 {
                return None;
            }
            let at = std::mem::size_of::<pg_sys::ArrayType>() + 2 * 4 * self.ndim();
            Some(std::slice::from_raw_parts(self.0.cast::<u8>().add(at), self.len().div_ceil(8)))
        }
    }

    /// The position of the first NULL element, if any.
    fn first_null(&self) -> Option<usize> {
        let bitmap = self.null_bitmap()?;
        (0..self.len()).find(|&i| bitmap[i / 8] & (1 << (i % 8)) == 0)
    }

    /// The subscripts of element `index` (in storage order): `[2][3]`.
    fn subscripts(&self, index: usize) -> String {
        let (dims, lbounds) = self.dims();
        let mut rest = index;
        let mut parts = vec![0i64; dims.len()];
        for d in (0..dims.len()).rev() {
            let len = dims[d].max(1) as usize;
            parts[d] = lbounds[d] as i64 + (rest % len) as i64;
            rest /= len;
        }
        parts.iter().map(|p| format!("[{p}]")).collect()
    }

    /// The bounds as array_dims writes them: `[1:2][1:3][1:4]`.
    fn bounds(&self) -> String {
        let (dims, lbounds) = self.dims();
        dims.iter().zip(lbounds).map(|(&d, &lb)| format!("[{lb}:{}]", lb as i64 + d as i64 - 1)).collect()
    }

    /// ARR_DATA_PTR
    fn data(&self) -> *const u8 {
        // SAFETY: as `null_bitmap`; ARR_OVERHEAD_NONULLS when there is no bitmap.
        unsafe {
            let offset = match (*self.0).dataoffset {
                0 => maxalign(std::mem::size_of::<pg_sys::ArrayType>() + 2 * 4 * self.ndim()),
                at => at as usize,
            };
            self.0.cast::<u8>().add(offset)
        }
    }
}

fn maxalign(len: usize) -> usize {
    let a = pg_sys::MAXIMUM_ALIGNOF as usize;
    (len + a - 1) & !(a - 1)
}

/// A matrix whose values are borrowed from a detoasted array where they can be (aligned for
/// f32, as they are in practice), copied otherwise.
pub(crate) struct MatrixRef<'a> {
    values: Cow<'a, [f32]>,
    rows: usize,
    cols: usize,
}

impl MatrixRef<'_> {
    /// "32x128"
    fn shape(&self) -> String {
        format!("{}x{}", self.rows, self.cols)
    }
}

impl FlatArray {
    /// The matrix of a `real[]` (see the module's notes).
    fn real_matrix(&self) -> Result<MatrixRef<'_>, ArrayIssue> {
        if self.elemtype() != pg_sys::FLOAT4OID {
            return Err(ArrayIssue::NotReal(type_name(self.elemtype())));
        }
        let ndim = self.ndim();
        if ndim > 2 {
            return Err(ArrayIssue::TooManyDims(ndim, self.bounds()));
        }
        if let Some(i) = self.first_null() {
            return Err(ArrayIssue::Null(self.subscripts(i)));
        }
        let n = self.len();
        let (rows, cols) = match self.dims().0 {
            [len] => (1, *len as usize),
            [rows, cols] => (*rows as usize, *cols as usize),
            _ => (0, 0),
        };
        if n == 0 {
            return Ok(MatrixRef { values: Cow::Borrowed(&[]), rows: 0, cols: 0 });
        }
        let data = self.data();
        let values = if data.align_offset(std::mem::align_of::<f32>()) == 0 {
            // SAFETY: a float4 array without NULLs holds its n values, 4 bytes each, from
            // ARR_DATA_PTR, aligned (checked), for as long as the array (borrowed).
            Cow::Borrowed(unsafe { std::slice::from_raw_parts(data.cast::<f32>(), n) })
        } else {
            let mut values = vec![0f32; n];
            // SAFETY: as above, copied bytewise.
            unsafe { std::ptr::copy_nonoverlapping(data, values.as_mut_ptr().cast::<u8>(), n * 4) };
            Cow::Owned(values)
        };
        Ok(MatrixRef { values, rows, cols })
    }
}

impl Matrix {
    /// The matrix of a `real[]` datum (see the module's notes).
    ///
    /// # Safety
    /// `datum` is a non-NULL array datum.
    unsafe fn read(datum: pg_sys::Datum) -> Result<Matrix, ArrayIssue> {
        // SAFETY: the caller's.
        let array = unsafe { FlatArray::new(datum) };
        let m = array.real_matrix()?;
        Ok(Matrix { values: m.values.into_owned(), rows: m.rows, cols: m.cols })
    }

    /// The matrix, borrowed.
    pub(crate) fn view(&self) -> MatrixRef<'_> {
        MatrixRef { values: Cow::Borrowed(&self.values), rows: self.rows, cols: self.cols }
    }

    /// "32x128"
    fn shape(&self) -> String {
        self.view().shape()
    }
}

impl FromDatum for Matrix {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Self> {
        if is_null {
            return None;
        }
        // SAFETY: a non-NULL array datum (the argument's or the column's declared type).
        Some(unsafe { Matrix::read(datum) }.unwrap_or_else(|issue| raise_issue("array", issue)))
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for Matrix {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: as FromDatum above; a NULL is never passed here (pgrx calls
        // unbox_nullable_arg for an Option argument, and STRICT functions get no NULLs).
        unsafe { arg.unbox_arg_using_from_datum().unwrap_or_else(|| panic!("argument {index} must not be null")) }
    }
}

impl IntoDatum for Matrix {
    /// A 2-D float4 array of `rows` x `cols`, lower bounds 1, built in place (no Datum per
    /// element, as construct_md_array would take); 0 rows or 0 columns: `'{}'`.
    fn into_datum(self) -> Option<pg_sys::Datum> {
        use PgSqlErrorCode::*;
        let n = self.values.len();
        if self.rows.checked_mul(self.cols) != Some(n) {
            raise(
                ERRCODE_INTERNAL_ERROR,
                format!("a matrix of {} has {n} values", self.shape()),
                None,
            );
        }
        if n == 0 {
            // SAFETY: float4 is a built-in type.
            return Some(pg_sys::Datum::from(unsafe { pg_sys::construct_empty_array(pg_sys::FLOAT4OID) }));
        }
        let header = maxalign(std::mem::size_of::<pg_sys::ArrayType>() + 2 * 4 * 2);
        if n > MAX_ARRAY_SIZE || header + 4 * n > MAX_ALLOC_SIZE {
            raise(
                ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                format!("a matrix of {} is too large for an array (at most {MAX_ARRAY_SIZE} values)", self.shape()),
                None,
            );
        }
        let bytes = header + 4 * n;
        // SAFETY: a fresh allocation of `bytes` (under MaxAllocSize), zeroed, filled as
        // utils/array.h lays out an array without NULLs: the header, the dimensions, the
        // lower bounds, then the values from ARR_OVERHEAD_NONULLS(2).
        unsafe {
            let array = pg_sys::palloc0(bytes).cast::<pg_sys::ArrayType>();
            pgrx::set_varsize_4b(array.cast(), bytes as i32);
            (*array).ndim = 2;
            (*array).dataoffset = 0;
            (*array).elemtype = pg_sys::FLOAT4OID;
            let dims = array.cast::<u8>().add(std::mem::size_of::<pg_sys::ArrayType>()).cast::<i32>();
            dims.write(self.rows as i32);
            dims.add(1).write(self.cols as i32);
            dims.add(2).write(1);
            dims.add(3).write(1);
            std::ptr::copy_nonoverlapping(self.values.as_ptr().cast::<u8>(), array.cast::<u8>().add(header), 4 * n);
            Some(pg_sys::Datum::from(array))
        }
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::FLOAT4ARRAYOID
    }
}

unsafe impl BoxRet for Matrix {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        match self.into_datum() {
            // SAFETY: a datum of the function's declared return type, real[].
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

/// `real[]` as an argument and as a result (what pgrx writes for `Vec<f32>`).
const REAL_ARRAY: SqlMappingRef = SqlMappingRef::Array(SqlArrayMappingRef::As("real"));

unsafe impl SqlTranslatable for Matrix {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(Matrix);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(REAL_ARRAY);
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(REAL_ARRAY));
}

/// A `real[]` argument read when the function asks, so that its errors name it (query,
/// document).
struct RealArray(pg_sys::Datum);

impl FromDatum for RealArray {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Self> {
        (!is_null).then_some(RealArray(datum))
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for RealArray {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: as Matrix's.
        unsafe { arg.unbox_arg_using_from_datum().unwrap_or_else(|| panic!("argument {index} must not be null")) }
    }
}

unsafe impl SqlTranslatable for RealArray {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(RealArray);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(REAL_ARRAY);
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Err(ReturnsError::Datum);
}

impl RealArray {
    fn array(&self) -> FlatArray {
        // SAFETY: a non-NULL argument of type real[] (its FromDatum).
        unsafe { FlatArray::new(self.0) }
    }
}

/// `embed.maxsim(query real[], document real[])`: the sum over the query's rows of the
/// largest dot product with a document row (ColBERT's late-interaction score), exact to
/// float32 rounding; 0 when either side has no rows.
#[pg_extern(immutable, strict, parallel_safe, schema = "embed", name = "maxsim")]
fn maxsim(query: RealArray, document: RealArray) -> f32 {
    let (query, document) = (query.array(), document.array());
    let query = query.real_matrix().unwrap_or_else(|issue| raise_issue("query", issue));
    let document = document.real_matrix().unwrap_or_else(|issue| raise_issue("document", issue));
    score(&query, &document)
}

/// `embed.maxsim(query anyarray, document anyarray)`: [`maxsim`] over arrays of pgvector's
/// `vector` (a vector per row; they must all have one dimension).
#[pg_extern(immutable, strict, parallel_safe, schema = "embed", name = "maxsim")]
fn maxsim_vectors(query: AnyArray, document: AnyArray) -> f32 {
    // SAFETY: non-NULL array arguments (STRICT).
    let (query, document) = unsafe { (FlatArray::new(query.datum()), FlatArray::new(document.datum())) };
    score(&any_matrix(&query, "query"), &any_matrix(&document, "document"))
}

/// MaxSim of two matrices (0 when either has no rows), or the ERROR for their widths or a
/// cancel.
pub(crate) fn score(query: &MatrixRef, document: &MatrixRef) -> f32 {
    if query.rows == 0 || document.rows == 0 {
        return 0.0;
    }
    if query.cols != document.cols {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("query is {} but document is {}: the widths must match", query.shape(), document.shape()),
            None,
        );
    }
    let (q, d) = (query, document);
    pg_embed_core::maxsim::maxsim_until(&q.values, q.rows, &d.values, d.rows, q.cols, &crate::interrupt_pending)
        .unwrap_or_else(|| {
            // Stopped for a pending cancel, timeout or terminate: Postgres raises it.
            pgrx::check_for_interrupts!();
            raise(PgSqlErrorCode::ERRCODE_QUERY_CANCELED, "canceling statement due to user request".into(), None)
        })
}

/// The matrix of an `anyarray` argument: a `real[]`, or an array of pgvector's `vector` (a
/// row per element); any other element type is refused (42804).
fn any_matrix<'a>(array: &'a FlatArray, what: &str) -> MatrixRef<'a> {
    let elemtype = array.elemtype();
    if elemtype == pg_sys::FLOAT4OID {
        return array.real_matrix().unwrap_or_else(|issue| raise_issue(what, issue));
    }
    if !is_pgvector(elemtype) {
        raise(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!("embed.maxsim takes real[] or pgvector's vector[], not {}[]", type_name(elemtype)),
            Some("Cast both arguments to real[] (a 2-D array, a row per vector)."),
        );
    }
    let m = read_vectors(array, what);
    MatrixRef { values: Cow::Owned(m.values), rows: m.rows, cols: m.cols }
}

/// Whether `oid` is pgvector's `vector`: a varlena type named `vector`.
fn is_pgvector(oid: pg_sys::Oid) -> bool {
    // SAFETY: a syscache lookup by oid, released before returning; the tuple's struct is
    // pg_type's row.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::TYPEOID as _, pg_sys::Datum::from(oid));
        if tuple.is_null() {
            return false;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_type>(tuple);
        let found = CStr::from_ptr((*form).typname.data.as_ptr()).to_bytes() == b"vector" && (*form).typlen == -1;
        pg_sys::ReleaseSysCache(tuple);
        found
    }
}

/// The rows of a 1-D array of pgvector `vector`s: each element is a varlena of an int32
/// header, int16 dim, int16 unused, then dim float4 (pgvector's `Vector`).
fn read_vectors(array: &FlatArray, what: &str) -> Matrix {
    use PgSqlErrorCode::*;
    let ndim = array.ndim();
    if ndim > 1 {
        raise(
            ERRCODE_ARRAY_ELEMENT_ERROR, // 2202E array_subscript_error
            format!("{what} must be a 1-D array of vectors, not {ndim}-D ({})", array.bounds()),
            Some("A vector[] holds a vector per row."),
        );
    }
    if let Some(i) = array.first_null() {
        raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, format!("{what} must not contain NULL (element {})", array.subscripts(i)), None);
    }
    let n = array.len();
    if n == 0 {
        return Matrix::default();
    }
    let (mut len, mut byval, mut align) = (0i16, false, 0 as core::ffi::c_char);
    let (mut elems, mut nulls, mut count) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
    // SAFETY: a flat array of the element type whose length, by-value flag and alignment
    // are asked for; deconstruct_array returns palloc'd arrays of `count` datums.
    let elems = unsafe {
        pg_sys::get_typlenbyvalalign(array.elemtype(), &mut len, &mut byval, &mut align);
        pg_sys::deconstruct_array(array.0, array.elemtype(), len as _, byval, align, &mut elems, &mut nulls, &mut count);
        std::slice::from_raw_parts(elems, count.max(0) as usize)
    };
    let lbound = array.dims().1.first().copied().unwrap_or(1) as i64;
    let mut matrix = Matrix::default();
    for (i, &element) in elems.iter().enumerate() {
        // SAFETY: a non-NULL varlena element; detoasted to a 4-byte header if it had
        // another (pg_detoast_datum returns it as it is otherwise).
        let (size, dim, values) = unsafe {
            let v = pg_sys::pg_detoast_datum(element.cast_mut_ptr()).cast::<u8>();
            let size = pgrx::varsize_any(v.cast());
            let dim = if size >= 8 { v.add(4).cast::<i16>().read_unaligned() } else { -1 };
            (size, dim, v.add(8))
        };
        if dim < 0 || size != 8 + 4 * dim as usize {
            raise(
                ERRCODE_DATATYPE_MISMATCH,
                format!("type \"{}\" of {what} is not pgvector's vector", type_name(array.elemtype())),
                None,
            );
        }
        let dim = dim as usize;
        if i == 0 {
            matrix.cols = dim;
            matrix.values.reserve(n * dim);
        } else if dim != matrix.cols {
            raise(
                ERRCODE_DATA_EXCEPTION,
                format!(
                    "{what}'s vectors differ in dimensions: element [{lbound}] has {} and element [{}] has {dim}",
                    matrix.cols,
                    lbound + i as i64
                ),
                None,
            );
        }
        let start = matrix.values.len();
        matrix.values.resize(start + dim, 0.0);
        // SAFETY: the element holds `dim` float4 after its 8 bytes of header (its size).
        unsafe {
            std::ptr::copy_nonoverlapping(values, matrix.values[start..].as_mut_ptr().cast::<u8>(), 4 * dim)
        };
        matrix.rows += 1;
    }
    matrix
}
