//! `berth-shim`: one per container, started by the berth daemon. Everything
//! it does lives in the library (`berth_shim::server`).

fn main() {
    berth_shim::server::main()
}
