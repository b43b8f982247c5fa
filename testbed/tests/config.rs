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
    // The impairment forwarder lives in the bridge namespace and replaces the nftables loss.
    let imp: mpa_testbed::Impairment = "drop=1".parse().unwrap();
    let e = TestBed::up(BedConfig {
        impair: Some(imp.clone()),
        ..BedConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("bridge namespace"), "{e}");
    let e = TestBed::up(BedConfig {
        bridge: true,
        loss_percent: 5,
        impair: Some(imp),
        ..BedConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("drop="), "{e}");
}
