//! The whole-system tests that change what the whole machine shares — the huge page reserve
//! (`vm.nr_hugepages`), which every datapath's UMEM and regions draw on — in a test binary of
//! their own, which cargo runs alone, one test at a time ([`one_at_a_time`]).

mod af_xdp_modes;
mod nics_runbook;

/// Held by each test here for its whole run: they raise and restore the same reserve.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed holding it left nothing half-changed: its guards restored the reserve.
    MACHINE.lock().unwrap_or_else(|e| e.into_inner())
}
