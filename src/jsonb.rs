//! A jsonb argument that is read as JSON or, when serde_json cannot take it (a number beyond
//! f64 such as 1e400, which PostgreSQL's jsonb holds as numeric), kept as its text so that
//! the caller raises a clear ERROR. pgrx's own `JsonB` panics there (XX000 with a trace).

use pgrx::callconv::{Arg, ArgAbi};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The argument: its JSON value, or the jsonb's text and why serde_json refused it.
pub struct JsonbArg(pub std::result::Result<serde_json::Value, (String, String)>);

impl FromDatum for JsonbArg {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Self> {
        if is_null {
            return None;
        }
        // SAFETY: the datum is a jsonb (the argument's declared type); jsonb_out reads it
        // (detoasting it itself) and returns a palloc'd C string.
        let text = unsafe {
            pgrx::direct_function_call::<&core::ffi::CStr>(pg_sys::jsonb_out, &[Some(datum)])
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        Some(JsonbArg(serde_json::from_str(&text).map_err(|e| (text, e.to_string()))))
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for JsonbArg {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: as FromDatum above; a NULL is never passed here (pgrx calls
        // unbox_nullable_arg for an Option argument).
        unsafe { arg.unbox_arg_using_from_datum().unwrap_or_else(|| panic!("argument {index} must not be null")) }
    }
}

pgrx::pgrx_sql_entity_graph::metadata::impl_sql_translatable!(JsonbArg, "jsonb");
