//! The checked-in header is the one the sources generate: a change to the ABI that was not
//! written into `capi/include/mpaxdp.h` (`make header`) fails here.

#[test]
fn the_checked_in_header_is_the_generated_one() {
    let generated = include_str!(concat!(env!("OUT_DIR"), "/mpaxdp.h"));
    // `make header`: write it instead of comparing.
    if std::env::var_os("MPAXDP_WRITE_HEADER").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/include/mpaxdp.h");
        std::fs::write(path, generated).expect("writing capi/include/mpaxdp.h");
        return;
    }
    let checked_in = include_str!("../include/mpaxdp.h");
    assert!(
        generated == checked_in,
        "capi/include/mpaxdp.h differs from what capi/src generates: run `make header`"
    );
}
