//! Configurations the test bed refuses before it needs any privilege.

use mpa_testbed::{BedConfig, BedError, TestBed};

#[test]
fn bad_configurations_are_refused() {
    let e = TestBed::up(BedConfig {
        loss_percent: 5,
        ..BedConfig::default()
    })
    .unwrap_err();
    assert!(matches!(e, BedError::Config(_)), "{e}");
    let e = TestBed::up(BedConfig {
        bridge: true,
        loss_percent: 101,
        ..BedConfig::default()
    })
    .unwrap_err();
    assert!(matches!(e, BedError::Config(_)), "{e}");
    let e = TestBed::up(BedConfig {
        queues: 0,
        ..BedConfig::default()
    })
    .unwrap_err();
    assert!(matches!(e, BedError::Config(_)), "{e}");
}
