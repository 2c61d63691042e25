//! berth-nri
#[allow(
    clippy::all,
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    unused_imports,
    unused_mut,
    unused_variables,
    deprecated,
    unused_results,
    unknown_lints,
    unsafe_code
)]
#[rustfmt::skip]
pub mod api {
    include!(concat!(env!("OUT_DIR"), "/api.rs"));
}
#[allow(
    clippy::all,
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    unused_imports,
    unused_mut,
    unused_variables,
    deprecated,
    unused_results,
    unknown_lints,
    unsafe_code
)]
#[rustfmt::skip]
pub mod api_ttrpc {
    include!(concat!(env!("OUT_DIR"), "/api_ttrpc.rs"));
}
pub mod merge;
pub mod mux;
