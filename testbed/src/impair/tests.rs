use super::*;
use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

const PORT: u16 = 7777;

/// A TCP frame a → b (to PORT) with sequence number `seq` and `len` octets of payload.
fn tcp(seq: u32, len: usize, v6: bool, syn: bool) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let b = if v6 {
        b.ipv6([0xfd; 16], [0xfe; 16], 64)
    } else {
        b.ipv4([10, 99, 0, 1], [10, 99, 0, 2], 64)
    };
    let mut b = b.tcp(40000, PORT, seq, 65535);
    if syn {
        b = b.syn();
    }
    let payload: Vec<u8> = (0..len).map(|i| (i * 7 + seq as usize) as u8).collect();
    let mut f = Vec::new();
    b.write(&mut f, &payload).unwrap();
    f
}

fn seq_of(f: &[u8]) -> u32 {
    let t = tcp_of(f).unwrap();
    u32::from_be_bytes(f[t.header + 4..t.header + 8].try_into().unwrap())
}

/// Whether the frame's TCP checksum is right.
fn checksum_ok(f: &[u8]) -> bool {
    let p = SlicedPacket::from_ethernet(f).unwrap();
    let Some(TransportSlice::Tcp(t)) = p.transport else {
        panic!("not TCP")
    };
    let want = match p.net.unwrap() {
        etherparse::NetSlice::Ipv4(ip) => t
            .calc_checksum_ipv4(ip.header().source(), ip.header().destination())
            .unwrap(),
        etherparse::NetSlice::Ipv6(ip) => t
            .calc_checksum_ipv6(ip.header().source(), ip.header().destination())
            .unwrap(),
        _ => unreachable!(),
    };
    t.checksum() == want
}

fn shaper(spec: &str) -> Shaper {
    Shaper::new(&spec.parse().unwrap(), true, PORT)
}

/// Pushes frames 0..n (one per µs), pops everything due, and finally everything; returns the
/// output's sequence numbers.
fn run(s: &mut Shaper, n: u32, payload: usize) -> Vec<u32> {
    let mut out = Vec::new();
    for i in 0..n {
        s.push(u64::from(i), tcp(i, payload, false, false));
        while let Some(f) = s.pop(u64::from(i)) {
            out.push(seq_of(&f));
        }
    }
    while let Some(f) = s.pop(u64::MAX / 2) {
        out.push(seq_of(&f));
    }
    out
}

#[test]
fn parses_the_documented_example_and_per_direction_keys() {
    let imp: Impairment = "drop=20,reorder=5,dup=2,corrupt=0.1,delay-us=100,seed=7,both"
        .parse()
        .unwrap();
    let r = Rates {
        drop_ppm: 200_000,
        reorder_ppm: 50_000,
        dup_ppm: 20_000,
        corrupt_ppm: 1_000,
        delay_us: 100,
        ..Rates::default()
    };
    assert_eq!(
        imp,
        Impairment {
            a_to_b: r,
            b_to_a: r,
            seed: 7,
            ..Impairment::default()
        }
    );
    // Without `both`: a → b only; prefixed keys override one direction.
    let imp: Impairment = "drop=1.5,ba.dup=3,ab.reorder-by=5,port=any,syn,fix-csum,jitter-us=9"
        .parse()
        .unwrap();
    assert_eq!(imp.a_to_b.drop_ppm, 15_000);
    assert_eq!(imp.a_to_b.reorder_by, 5);
    assert_eq!(imp.a_to_b.jitter_us, 9);
    assert_eq!(imp.b_to_a.drop_ppm, 0);
    assert_eq!(imp.b_to_a.dup_ppm, 30_000);
    assert_eq!(imp.scope, Scope::AnyTcp);
    assert!(imp.syn && imp.fix_checksum);
    let imp: Impairment = "ba,drop=4,port=80".parse().unwrap();
    assert_eq!((imp.a_to_b.drop_ppm, imp.b_to_a.drop_ppm), (0, 40_000));
    assert_eq!(imp.scope, Scope::Port(80));
}

#[test]
fn parse_errors_name_the_bad_key() {
    for (text, key) in [
        ("drop=20,dorp=5", "dorp"),
        ("drop=abc", "drop"),
        ("dup=150", "dup"),
        ("reorder-by=0", "reorder-by"),
        ("xy.drop=1", "xy.drop"),
        ("ab.nonsense=1", "ab.nonsense"),
        ("drop", "drop"),
        ("port=http", "port"),
        ("seed=-1", "seed"),
        ("delay-us=1.5", "delay-us"),
        ("", ""),
    ] {
        let e = text.parse::<Impairment>().unwrap_err();
        assert_eq!(e.key, key, "{text}: {e}");
        assert!(e.to_string().contains(&format!("`{key}`")), "{e}");
    }
}

#[test]
fn a_seed_gives_exact_counts_and_the_same_fates_every_time() {
    let spec = "drop=20,reorder=5,dup=2,corrupt=0.1,seed=7,both";
    let mut s = shaper(spec);
    let out = run(&mut s, 10_000, 100);
    let st = *s.stats();
    assert_eq!(
        (
            st.frames,
            st.eligible,
            st.dropped,
            st.corrupted,
            st.duplicated,
            st.reordered
        ),
        (10_000, 10_000, 2_001, 10, 176, 401),
        "{st}"
    );
    assert_eq!(out.len() as u64, st.eligible - st.dropped + st.duplicated);
    // The same seed again: the same output, frame for frame.
    assert_eq!(run(&mut shaper(spec), 10_000, 100), out);
    // The other direction draws differently.
    let mut ba = Shaper::new(&spec.parse().unwrap(), false, PORT);
    let out_ba = run(&mut ba, 10_000, 100);
    assert_ne!(out_ba, out);
    assert_eq!(ba.stats().dropped, 1_918, "{}", ba.stats());
    // Another seed differs too.
    let other = run(
        &mut shaper("drop=20,reorder=5,dup=2,corrupt=0.1,seed=8"),
        10_000,
        100,
    );
    assert_ne!(other, out);
}

#[test]
fn untouched_frames_pass_at_once_and_unchanged() {
    let mut s = shaper("drop=100,delay-us=1000,both");
    let arp = {
        let mut f = vec![0xff; 6];
        f.extend([2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend([0u8; 28]);
        f
    };
    let other_port = {
        let mut f = Vec::new();
        PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4([1, 1, 1, 1], [2, 2, 2, 2], 64)
            .tcp(1000, 2000, 5, 100)
            .write(&mut f, b"hello")
            .unwrap();
        f
    };
    let syn = tcp(1, 0, false, true);
    let syn6 = tcp(2, 0, true, true);
    for f in [&arp, &other_port, &syn, &syn6] {
        assert_eq!(s.push(0, f.clone()), None);
        assert_eq!(s.pop(0).as_ref(), Some(f));
    }
    assert_eq!(s.stats().eligible, 0);
    // A SYN is eligible when asked for; data to the port always.
    let mut s = shaper("drop=100,syn");
    assert!(s.push(0, syn.clone()).is_some());
    assert!(s.push(0, tcp(3, 10, true, false)).is_some());
    assert_eq!(s.stats().dropped, 2);
    // `port=any`: every TCP frame.
    let mut s = shaper("drop=100,port=any");
    assert!(s.push(0, other_port.clone()).is_some());
}

#[test]
fn reordered_frames_are_overtaken_by_exactly_n_frames_or_leave_at_their_deadline() {
    let mut s = shaper("reorder=20,reorder-by=3,reorder-us=1000000,seed=3");
    let out = run(&mut s, 40, 10);
    let held = s.stats().reordered;
    assert!(held > 0);
    // Frame i reordered: it appears after frames i+1..=i+3 (held frames counted as they
    // pass). Every frame comes out once.
    let mut sorted = out.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..40).collect::<Vec<_>>());
    let late: Vec<u32> = out
        .iter()
        .enumerate()
        .filter(|(pos, seq)| (**seq as usize) < *pos)
        .map(|(_, s)| *s)
        .collect();
    assert!(!late.is_empty(), "{out:?}");
    assert_eq!(
        out,
        [
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 15, 16, 11, 12, 17, 14, 18, 20, 21, 23, 19, 24,
            25, 22, 26, 28, 29, 30, 27, 31, 32, 34, 35, 36, 33, 37, 38, 39
        ],
        "{held} held"
    );
    // With nothing behind it, a held frame leaves at its deadline.
    let mut s = shaper("reorder=100,reorder-us=500");
    s.push(10, tcp(1, 10, false, false));
    assert_eq!(s.next_due(), Some(510));
    assert_eq!(s.pop(509), None);
    assert_eq!(s.pop(510).map(|f| seq_of(&f)), Some(1));
}

#[test]
fn duplicates_are_identical_and_follow_the_original() {
    let mut s = shaper("dup=100");
    let f = tcp(9, 33, true, false);
    s.push(0, f.clone());
    assert_eq!(s.pop(0).as_ref(), Some(&f));
    assert_eq!(s.pop(0).as_ref(), Some(&f));
    assert_eq!(s.pop(0), None);
    assert_eq!(s.stats().duplicated, 1);
}

#[test]
fn corruption_flips_one_payload_bit_and_the_checksum_catches_it_unless_fixed() {
    for v6 in [false, true] {
        for len in [1, 2, 101, 1400] {
            for (fix, seed) in [(false, 1), (true, 2), (false, 3), (true, 4)] {
                let spec = format!(
                    "corrupt=100,seed={seed}{}",
                    if fix { ",fix-csum" } else { "" }
                );
                let mut s = shaper(&spec);
                let f = tcp(5, len, v6, false);
                assert!(checksum_ok(&f));
                s.push(0, f.clone());
                let g = s.pop(0).unwrap();
                let t = tcp_of(&f).unwrap();
                let flipped: u32 = f[t.payload..]
                    .iter()
                    .zip(&g[t.payload..])
                    .map(|(a, b)| (a ^ b).count_ones())
                    .sum();
                assert_eq!(flipped, 1, "v6={v6} len={len}");
                assert_eq!(checksum_ok(&g), fix, "v6={v6} len={len} fix={fix}");
                // Headers untouched but for the checksum.
                assert_eq!(f[..t.header + 16], g[..t.header + 16]);
                assert_eq!(f[t.header + 18..t.payload], g[t.header + 18..t.payload]);
            }
        }
    }
    // No payload: nothing to corrupt, passed unchanged.
    let mut s = shaper("corrupt=100");
    let ack = tcp(5, 0, false, false);
    s.push(0, ack.clone());
    assert_eq!(s.pop(0), Some(ack));
    assert_eq!(s.stats().corrupted, 0);
}

#[test]
fn delay_and_jitter_keep_order() {
    let mut s = shaper("delay-us=100,jitter-us=50,seed=11");
    for i in 0..20u32 {
        s.push(u64::from(i) * 10, tcp(i, 10, false, false));
    }
    assert_eq!(s.stats().delayed, 20);
    let mut out = Vec::new();
    let mut last = 0;
    for now in 0..1000u64 {
        while let Some(f) = s.pop(now) {
            out.push(seq_of(&f));
            last = now;
            assert!(now >= 100, "left before its delay");
        }
    }
    assert_eq!(out, (0..20).collect::<Vec<_>>());
    // The last frame arrived at 190 and left within 100..=150 µs of it.
    assert!((290..=340).contains(&last), "{last}");
    assert_eq!(s.next_due(), None);
}

#[test]
fn the_delay_queue_is_bounded() {
    let mut s = shaper("delay-us=1000000");
    let f = tcp(1, 10, false, false);
    for _ in 0..MAX_QUEUED {
        assert_eq!(s.push(0, f.clone()), None);
    }
    assert_eq!(s.push(0, f.clone()), Some(f));
    assert_eq!(
        (s.stats().overflow, s.stats().delayed),
        (1, MAX_QUEUED as u64)
    );
    assert_eq!(s.pop(999_999), None);
    assert!(s.pop(1_000_000).is_some());
}
