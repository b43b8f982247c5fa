//! Vectors and differential tests: every implementation against the bitwise reference.

use proptest::prelude::*;

use super::impls::{self, Impl};
use super::*;

/// (input, CRC32c) pairs: RFC 3720 B.4, the check value, and MPA FPDUs.
fn vectors() -> Vec<(Vec<u8>, u32)> {
    let mut v = vec![
        (vec![0u8; 32], 0x8A91_36AA),
        (vec![0xffu8; 32], 0x62A8_AB43),
        ((0u8..32).collect(), 0x46DD_794E),
        ((0u8..32).rev().collect(), 0x113F_DB5C),
        (b"123456789".to_vec(), 0xE306_9283),
        (Vec::new(), 0),
    ];
    // RFC 5044 golden FPDU: header octets, 4 zero octets, QN 0, MSN 1, MO 0, 24 zero octets;
    // the CRC goes on the wire as 52 23 99 83.
    let mut golden = vec![0x00, 0x00, 0x00, 0x00, 0x00, 0x2a, 0x41, 0x43];
    golden.extend([0; 4]); // reserved
    golden.extend([0; 4]); // QN 0
    golden.extend([0, 0, 0, 1]); // MSN 1
    golden.extend([0; 4]); // MO 0
    golden.extend([0; 24]);
    v.push((golden, u32::from_le_bytes([0x52, 0x23, 0x99, 0x83])));
    let fpdu = [
        0x00, 0x0e, 0xc1, 0x40, 0x00, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    v.push((fpdu.to_vec(), 0x5F4C_D3EB));
    let mut prefixed = vec![0u8; 4];
    prefixed.extend(fpdu);
    v.push((prefixed, 0xA1F9_1F3F));
    v
}

/// Deterministic filler (xorshift64*), so that property tests can generate 70 000 octets
/// from one seed and still shrink.
fn fill(buf: &mut [u8], seed: u64) {
    let mut s = seed | 1;
    for chunk in buf.chunks_mut(8) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        let v = s.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

fn all() -> Vec<Impl> {
    let v = impls::all();
    assert!(!v.is_empty());
    v
}

#[test]
fn vectors_every_impl() {
    for (data, want) in vectors() {
        assert_eq!(crc32c_reference(&data), want, "reference {data:02x?}");
        assert_eq!(crc32c(&data), want, "default {data:02x?}");
        for imp in all() {
            assert_eq!(imp.append(0, &data), want, "{imp:?} {data:02x?}");
            let mut dst = vec![0x55; data.len()];
            assert_eq!(imp.copy(0, &mut dst, &data), want, "{imp:?} copy");
            assert_eq!(dst, data);
            for cut in 0..=data.len() {
                let (a, b) = data.split_at(cut);
                assert_eq!(imp.append(imp.append(0, a), b), want, "{imp:?} cut {cut}");
            }
        }
    }
}

#[test]
fn vectors_in_large_buffers() {
    // The vectors again, embedded at the end of long zero/0xff runs, so that the SIMD paths
    // (not just the short-input chains) see them.
    for (data, want) in vectors() {
        for pad in [0usize, 300, 1000, 5000] {
            for fill_octet in [0x00u8, 0xff] {
                let mut buf = vec![fill_octet; pad];
                let prefix = crc32c_reference(&buf);
                buf.extend(&data);
                let whole = crc32c_reference(&buf);
                assert_eq!(crc32c_combine(prefix, want, data.len() as u64), whole);
                for imp in all() {
                    assert_eq!(imp.append(0, &buf), whole, "{imp:?} pad {pad}");
                    assert_eq!(imp.append(prefix, &data), want_after(prefix, &data));
                }
            }
        }
    }
}

fn want_after(prefix: u32, data: &[u8]) -> u32 {
    !portable::bitwise(!prefix, data)
}

#[test]
fn every_length_and_alignment() {
    let mut buf = vec![0u8; 1200 + 64];
    fill(&mut buf, 7);
    let imps = all();
    for start in 0..40 {
        let data = &buf[start..];
        let mut raw = !0u32;
        for len in 0..=1200 {
            let want = !raw;
            for imp in &imps {
                assert_eq!(
                    imp.append(0, &data[..len]),
                    want,
                    "{imp:?} start {start} len {len}"
                );
            }
            if len < data.len() {
                raw = portable::bitwise(raw, &data[len..=len]);
            }
        }
    }
}

#[test]
fn lengths_around_the_kernels_boundaries() {
    // Hybrid rounds are 272 octets (4 x 32 vector + 3 x 48 scalar), merged every 256 rounds;
    // folding starts at 128; the three-chain kernel's blocks top out at 3 x 4096.
    let mut buf = vec![0u8; 300_064];
    fill(&mut buf, 13);
    let round = 272;
    let mut lens = vec![3 * 4096 - 1, 3 * 4096, 3 * 4096 + 1, 3 * 4096 + 24, 300_000];
    for r in [3, 4, 5, 16, 255, 256, 257, 512, 600] {
        for d in [0, 1, 8, 23, 24, 45, 46, 100, 200, 271] {
            lens.extend([r * round + d, r * round - 1 - d.min(r * round - 1)]);
        }
    }
    for len in lens {
        for off in [0, 1, 13] {
            let data = &buf[off..off + len];
            let want = !portable::bitwise(!0, data);
            for imp in all() {
                assert_eq!(imp.append(0, data), want, "{imp:?} len {len} off {off}");
                let mut dst = vec![0u8; len];
                assert_eq!(imp.copy(0, &mut dst, data), want, "{imp:?} copy len {len}");
                assert!(dst == data, "{imp:?} copy len {len}");
            }
        }
    }
}

#[test]
fn copy_every_length_and_alignment() {
    let mut src = vec![0u8; 700 + 64];
    fill(&mut src, 11);
    for imp in all() {
        for (s_off, d_off) in [(0, 0), (1, 0), (0, 3), (5, 17), (31, 32)] {
            for len in 0..=700 {
                let s = &src[s_off..s_off + len];
                let mut dst = vec![0xa5u8; len + 64];
                let got = imp.copy(0x1234_5678, &mut dst[d_off..d_off + len], s);
                assert_eq!(got, want_after(0x1234_5678, s), "{imp:?} len {len}");
                assert_eq!(&dst[d_off..d_off + len], s);
                assert!(
                    dst[..d_off].iter().all(|&b| b == 0xa5),
                    "{imp:?} wrote before"
                );
                assert!(
                    dst[d_off + len..].iter().all(|&b| b == 0xa5),
                    "{imp:?} wrote after"
                );
            }
        }
    }
}

#[test]
fn copy_length_mismatch_copies_the_common_prefix() {
    let src: Vec<u8> = (0..=255).collect();
    for imp in all() {
        let mut short = [0u8; 100];
        assert_eq!(imp.copy(0, &mut short, &src), crc32c(&src[..100]));
        assert_eq!(&short[..], &src[..100]);
        let mut long = [0u8; 300];
        assert_eq!(imp.copy(0, &mut long, &src), crc32c(&src));
        assert_eq!(&long[..256], &src[..]);
        assert!(long[256..].iter().all(|&b| b == 0));
    }
    let mut short = [0u8; 9];
    assert_eq!(crc32c_copy(0, &mut short, b"123456789abc"), 0xE306_9283);
    assert_eq!(crc32c_copy(0, &mut [], b"123456789abc"), 0);
}

#[test]
fn default_dispatch_matches_selected_impl() {
    let mut buf = vec![0u8; 70_000];
    fill(&mut buf, 3);
    let mut lens: Vec<usize> = vec![0, 1, 7, 63, 64, 127, 128, 255, 256, 257, 1024, 1448];
    lens.extend([4096, 8191, 8192, 16_384, 65_536, 70_000]);
    for len in lens {
        let d = impls::selected(len);
        assert_eq!(d.name(), selected_kernel(len));
        let data = &buf[..len];
        assert_eq!(crc32c(data), d.append(0, data), "{d:?} {len}");
        assert_eq!(crc32c(data), crc32c_reference(data), "{d:?} {len}");
        let mut out = vec![0u8; len];
        assert_eq!(
            crc32c_copy(0, &mut out, data),
            crc32c(data),
            "{d:?} copy {len}"
        );
        assert!(out == data);
    }
}

#[test]
fn multiply_and_shift() {
    // x^32 = P's lower terms; x^31 * x = x^32.
    assert_eq!(portable::xpow(32), POLY);
    assert_eq!(portable::mul(1 << 0, 1 << 30), POLY);
    for (a, b) in [
        (0x1234_5678u32, 0x9abc_def0u32),
        (!0, !0),
        (1 << 31, 0xdead_beef),
    ] {
        assert_eq!(portable::mul(a, b), portable::mul(b, a));
    }
    for n in [
        0u64,
        1,
        2,
        15,
        16,
        17,
        255,
        4096,
        1 << 20,
        (1 << 40) + 3,
        u64::MAX,
    ] {
        let c = 0xcafe_babe;
        let by_table = portable::shift(c, n);
        // Through x^(8n) computed by square and multiply (8n may overflow: use (x^8)^n).
        let mut r = c;
        let mut base = portable::xpow(8);
        let mut e = n;
        while e != 0 {
            if e & 1 != 0 {
                r = portable::mul(r, base);
            }
            base = portable::mul(base, base);
            e >>= 1;
        }
        assert_eq!(by_table, r, "n {n}");
        assert_eq!(shift(c, n), r, "dispatched n {n}");
        if n <= 4096 {
            assert_eq!(
                by_table,
                portable::bitwise(c, &vec![0; n as usize]),
                "zeros {n}"
            );
        }
    }
}

/// The CPU's shift (two table multiplications below 2^16 octets, one per nibble above) against
/// the portable one at every length up to past 2^16 in steps, each table edge, and far beyond.
#[test]
fn shift_matches_the_portable_shift() {
    let edges = [
        0u64,
        1,
        255,
        256,
        257,
        65_279,
        65_280,
        65_535,
        65_536,
        65_537,
        1 << 40,
    ];
    for n in (0..70_000u64).step_by(7).chain(edges) {
        for crc in [0u32, 1, 0x8000_0000, 0xE306_9283, u32::MAX] {
            assert_eq!(
                crc32c_combine(crc, 0, n),
                portable::shift(crc, n),
                "crc {crc:#x} n {n}"
            );
        }
    }
}

#[test]
fn combine_and_zeros() {
    let mut buf = vec![0u8; 5000];
    fill(&mut buf, 5);
    for cut in [0, 1, 3, 4, 5, 100, 2500, 4999, 5000] {
        let (a, b) = buf.split_at(cut);
        assert_eq!(
            crc32c_combine(crc32c(a), crc32c(b), b.len() as u64),
            crc32c(&buf)
        );
    }
    assert_eq!(crc32c_combine(0, 0xE306_9283, 9), 0xE306_9283);
    assert_eq!(crc32c_combine(0xE306_9283, 0, 0), 0xE306_9283);
    for n in [0u64, 1, 31, 32, 33, 1000, 4096] {
        let zeros = vec![0u8; n as usize];
        assert_eq!(crc32c_append_zeros(0, n), crc32c(&zeros));
        assert_eq!(
            crc32c_append_zeros(0x1234_5678, n),
            crc32c_append(0x1234_5678, &zeros)
        );
    }
    // Associativity over huge lengths.
    let (n1, n2) = (1u64 << 41, (1u64 << 33) + 12_345);
    assert_eq!(
        crc32c_append_zeros(crc32c_append_zeros(0x0bad_f00d, n1), n2),
        crc32c_append_zeros(0x0bad_f00d, n1 + n2)
    );
}

fn len_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..=600, 0usize..=70_000]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn differential(len in len_strategy(), off in 0usize..64, seed: u64, init: u32) {
        let mut buf = vec![0u8; len + 64];
        fill(&mut buf, seed);
        let data = &buf[off..off + len];
        let want = crc32c_reference(data);
        let want_init = want_after(init, data);
        prop_assert_eq!(crc32c(data), want);
        prop_assert_eq!(crc32c_append(init, data), want_init);
        for imp in all() {
            prop_assert_eq!(imp.append(0, data), want, "{:?}", imp);
            prop_assert_eq!(imp.append(init, data), want_init, "{:?}", imp);
        }
    }

    #[test]
    fn differential_copy(len in len_strategy(), s_off in 0usize..64, d_off in 0usize..64,
                         seed: u64, init: u32) {
        let mut buf = vec![0u8; len + 64];
        fill(&mut buf, seed);
        let src = &buf[s_off..s_off + len];
        let want = want_after(init, src);
        let mut out = vec![0u8; len + 64];
        prop_assert_eq!(crc32c_copy(init, &mut out[d_off..d_off + len], src), want);
        prop_assert_eq!(&out[d_off..d_off + len], src);
        for imp in all() {
            let mut out = vec![0u8; len + 64];
            prop_assert_eq!(imp.copy(init, &mut out[d_off..d_off + len], src), want, "{:?}", imp);
            prop_assert_eq!(&out[d_off..d_off + len], src, "{:?}", imp);
        }
    }

    #[test]
    fn append_and_combine_at_random_splits(len in len_strategy(), off in 0usize..64,
                                           cut in any::<prop::sample::Index>(), seed: u64) {
        let mut buf = vec![0u8; len + 64];
        fill(&mut buf, seed);
        let data = &buf[off..off + len];
        let cut = cut.index(len + 1);
        let (a, b) = data.split_at(cut);
        let want = crc32c_reference(data);
        prop_assert_eq!(crc32c_combine(crc32c(a), crc32c(b), b.len() as u64), want);
        prop_assert_eq!(
            crc32c_combine(crc32c_reference(a), crc32c_reference(b), b.len() as u64),
            want
        );
        prop_assert_eq!(crc32c_rest(crc32c(a), want, b.len() as u64), crc32c_reference(b));
        for imp in all() {
            prop_assert_eq!(imp.append(imp.append(0, a), b), want, "{:?}", imp);
        }
    }
}

#[test]
fn combine_fixed_matches_combine() {
    for len in [0u64, 1, 7, 512, 4114, 65535, 1 << 33] {
        let f = CombineFixed::new(len);
        for (a, b) in [(0u32, 0u32), (0xdead_beef, 0x1234_5678), (u32::MAX, 1)] {
            assert_eq!(f.combine(a, b), crc32c_combine(a, b, len), "len {len}");
        }
    }
}

/// The AVX-512 kernels (where the CPU has them) plus the default, for the tests below.
fn avx512_impls() -> Vec<Impl> {
    [impls::avx512(), impls::hybrid512()]
        .into_iter()
        .flatten()
        .collect()
}

#[test]
fn avx512_every_length_and_misalignment() {
    // Every length 0..=1100 at every misalignment against a 64-octet boundary, plain and
    // fused copy, from a non-trivial register.
    let mut buf = vec![0u8; 1100 + 128];
    fill(&mut buf, 17);
    let base = buf.as_ptr().align_offset(64);
    for imp in avx512_impls() {
        for mis in 0..64 {
            let data = &buf[base + mis..base + mis + 1100];
            let mut raw = !0x0bad_cafe_u32;
            for len in 0..=1100 {
                let want = !raw;
                let d = &data[..len];
                assert_eq!(
                    imp.append(0x0bad_cafe, d),
                    want,
                    "{imp:?} mis {mis} len {len}"
                );
                if len % 7 == 0 || len < 300 {
                    let mut out = vec![0u8; len];
                    assert_eq!(
                        imp.copy(0x0bad_cafe, &mut out, d),
                        want,
                        "{imp:?} copy {len}"
                    );
                    assert!(out == d, "{imp:?} copy {len}");
                }
                if len < data.len() {
                    raw = portable::bitwise(raw, &data[len..=len]);
                }
            }
        }
    }
}

#[test]
fn avx512_large_lengths_misalignments_and_chaining() {
    // Around the alignment threshold, the hybrid's round (256 + 3 * 16 octets) and its
    // 256-round pieces; every misalignment for some, random ones for the rest.
    let mut buf = vec![0u8; 200_000 + 128];
    fill(&mut buf, 19);
    let base = buf.as_ptr().align_offset(64);
    let round = 304;
    let mut lens = vec![
        2048,
        16_383,
        32_767,
        32_768,
        32_769,
        32_768 + 63,
        65_536,
        65_536 + 5,
    ];
    for r in [3, 4, 255, 256, 257, 512, 600] {
        for d in [0, 1, 63, 64, 100, 303] {
            lens.push(r * round + d);
        }
    }
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..20 {
        lens.push(1100 + (next() % 190_000) as usize);
    }
    for imp in avx512_impls() {
        for (i, &len) in lens.iter().enumerate() {
            let misses: Vec<usize> = if i < 8 {
                (0..64).collect()
            } else {
                vec![0, (next() % 64) as usize]
            };
            for mis in misses {
                let data = &buf[base + mis..base + mis + len];
                let want = crc32c_reference(data);
                assert_eq!(imp.append(0, data), want, "{imp:?} len {len} mis {mis}");
                let cut = (next() as usize) % (len + 1);
                let (a, b) = data.split_at(cut);
                assert_eq!(imp.append(imp.append(0, a), b), want, "{imp:?} chain {cut}");
                assert_eq!(crc32c_append(crc32c(a), b), want, "default chain {len}");
                let mut out = vec![0u8; len + 64];
                let d_off = (next() % 64) as usize;
                let got = imp.copy(0, &mut out[d_off..d_off + len], data);
                assert_eq!(got, want, "{imp:?} copy len {len}");
                assert!(&out[d_off..d_off + len] == data, "{imp:?} copy len {len}");
            }
        }
    }
}

#[test]
fn selection_follows_the_table() {
    let names: Vec<&str> = impls::all().iter().map(|i| i.name()).collect();
    let lens = [
        0, 1, 64, 127, 128, 191, 192, 255, 256, 1023, 1024, 1448, 32_767, 32_768,
    ];
    for len in lens.into_iter().chain([1 << 20]) {
        let k = selected_kernel(len);
        assert!(names.contains(&k), "{k} for {len} not among {names:?}");
    }
    if impls::avx512().is_some() {
        assert_eq!(selected_kernel(191), "sse42");
        assert_eq!(selected_kernel(192), "vpclmul");
        assert_eq!(selected_kernel(255), "vpclmul");
        assert_eq!(selected_kernel(256), "avx512");
        assert_eq!(selected_kernel(32_767), "avx512");
        assert_eq!(selected_kernel(32_768), "hybrid512");
    } else if impls::vpclmul().is_some() {
        assert_eq!(selected_kernel(191), "sse42");
        assert_eq!(selected_kernel(192), "vpclmul");
        assert_eq!(selected_kernel(1023), "vpclmul");
        assert_eq!(selected_kernel(1024), "hybrid");
        assert_eq!(selected_kernel(1 << 20), "hybrid");
    }
}

/// The 32-bit native-endian word sum of `data` (a multiple of 4 octets), as
/// [`crc32c_append_summing`] takes it.
fn word_sum(data: &[u8]) -> u64 {
    data.chunks_exact(4)
        .map(|w| u64::from(u32::from_ne_bytes(w.try_into().unwrap())))
        .sum()
}

/// The CRC of the summing pass is exactly `crc32c_append`'s, at every length around its
/// blocks and at every alignment; the sum covers whole 64-octet blocks from the start (all of
/// them where the AVX-512 kernel runs, none elsewhere) and adds their words exactly.
#[test]
fn summing_pass_gives_the_crc_and_the_word_sum_of_its_blocks() {
    let mut buf = vec![0u8; 10_000];
    fill(&mut buf, 7);
    let avx512 = cfg!(target_arch = "x86_64") && level() == Level::Avx512;
    for len in (0..1100).chain([1448, 1460, 3840, 8948, 9000]) {
        for off in [0, 1, 2, 3, 30, 63] {
            let data = &buf[off..off + len];
            for init in [0, 0xdead_beef] {
                let (crc, sum, covered) = crc32c_append_summing(init, data);
                assert_eq!(crc, crc32c_append(init, data), "len {len} off {off}");
                assert_eq!(covered % 64, 0);
                if avx512 && len >= AVX512_FOLD_MIN {
                    assert_eq!(covered, len / 64 * 64, "len {len}");
                } else {
                    assert_eq!(covered, 0);
                }
                assert_eq!(sum, word_sum(&data[..covered]), "len {len} off {off}");
            }
        }
    }
}
