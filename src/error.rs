//! The SQL edge's errors: the only place that turns an `Error` into an `ereport` (with its
//! SQLSTATE, message and hint), and the note that an ERROR about to be raised is a cancel
//! (read by the statistics' `stats::Call` when the call it ends unwinds).

use std::cell::Cell;

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

use pg_embed_core::error::{Error, Result, SqlState};

thread_local! {
    /// Set just before an interrupt check raises a cancel (or a timeout or terminate).
    static CANCELLING: Cell<bool> = const { Cell::new(false) };
}

/// Notes that the interrupt check about to run raises a cancel, so that the model call it
/// ends is counted as cancelled rather than failed.
pub(crate) fn note_cancel() {
    CANCELLING.set(true);
}

/// Whether a cancel was noted since the last call of this function (which clears the note).
pub(crate) fn take_cancel_note() -> bool {
    CANCELLING.take()
}

fn sqlerrcode(state: SqlState) -> PgSqlErrorCode {
    use PgSqlErrorCode::*;
    match state {
        SqlState::InvalidParameterValue => ERRCODE_INVALID_PARAMETER_VALUE,
        SqlState::QueryCanceled => ERRCODE_QUERY_CANCELED,
        SqlState::StringDataRightTruncation => ERRCODE_STRING_DATA_RIGHT_TRUNCATION,
        SqlState::ProgramLimitExceeded => ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        SqlState::UndefinedObject => ERRCODE_UNDEFINED_OBJECT,
        SqlState::InsufficientPrivilege => ERRCODE_INSUFFICIENT_PRIVILEGE,
        SqlState::ObjectNotInPrerequisiteState => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        SqlState::UndefinedFile => ERRCODE_UNDEFINED_FILE,
        SqlState::IoError => ERRCODE_IO_ERROR,
        SqlState::DataCorrupted => ERRCODE_DATA_CORRUPTED,
        SqlState::FeatureNotSupported => ERRCODE_FEATURE_NOT_SUPPORTED,
        SqlState::NullValueNotAllowed => ERRCODE_NULL_VALUE_NOT_ALLOWED,
        SqlState::DataException => ERRCODE_DATA_EXCEPTION,
        SqlState::WrongObjectType => ERRCODE_WRONG_OBJECT_TYPE,
        SqlState::InternalError => ERRCODE_INTERNAL_ERROR,
        SqlState::InvalidBinaryRepresentation => ERRCODE_INVALID_BINARY_REPRESENTATION,
        SqlState::DatatypeMismatch => ERRCODE_DATATYPE_MISMATCH,
        SqlState::ReadOnlySqlTransaction => ERRCODE_READ_ONLY_SQL_TRANSACTION,
        SqlState::OutOfMemory => ERRCODE_OUT_OF_MEMORY,
    }
}

/// Raises `err` as a Postgres ERROR with its SQLSTATE, message and hint.
pub(crate) fn raise(err: Error) -> ! {
    if matches!(err, Error::Cancelled) {
        // The compute threads stopped for a pending cancel, timeout or terminate: Postgres
        // raises it with its own message and code (57014, or FATAL for a terminate).
        note_cancel();
        pgrx::check_for_interrupts!();
    }
    report(sqlerrcode(err.sqlstate()), err.to_string(), err.hint().as_deref())
}

/// Raises an ERROR with this SQLSTATE, message and hint: every ERROR of pg_embed's SQL layer
/// (`raise` of an `Error`, and `late.rs`'s errors of the arrays it reads) is made here.
pub(crate) fn report(code: PgSqlErrorCode, message: String, hint: Option<&str>) -> ! {
    let mut report = ErrorReport::new(code, message, "pg_embed");
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ereport(ERROR) returned")
}

pub(crate) trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T> {
    fn or_raise(self) -> T {
        self.unwrap_or_else(|e| raise(e))
    }
}

