//! Memory the application already has, registered (verbs' `ibv_reg_mr` over its own buffer;
//! docs/consumer.md, "Registering memory the application has"): a peer's Writes land
//! octet-exact in the application's own mapping of its memfd, which the datapath sealed
//! against resizing and leaves the application's when the region goes; what cannot be
//! registered is refused with its reason, and the datapath keeps no descriptor of it.

use mpa_app::{Consumer, ConsumerError};
use mpa_ctl_proto::client::{ClientError, ControlClient};
use mpa_ctl_proto::{ErrorCode, Message};
use mpa_shm::{Access, SharedMemory};
use mpa_tests::{
    ended_flow, gone_cleanly, hand_over, listen_in, require_privileged, stats, writes_from_a,
    BedConfig, DatapathProcess, TestBed,
};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

const PD: u32 = 31;
const WAIT: Duration = Duration::from_secs(10);

/// A memfd of the application's, `len` octets, sealable or not.
fn memfd(name: &str, len: u64, sealable: bool) -> OwnedFd {
    let extra = if sealable {
        MFdFlags::MFD_ALLOW_SEALING
    } else {
        MFdFlags::empty()
    };
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | extra).unwrap();
    nix::unistd::ftruncate(&fd, len as i64).unwrap();
    fd
}

fn seals(fd: BorrowedFd<'_>) -> SealFlag {
    SealFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GET_SEALS).unwrap())
}

#[test]
fn an_application_memfd_takes_a_peers_writes_octet_exact_in_its_own_mapping() {
    const WRITES: u64 = 64;
    const LEN: usize = 4096;
    if !require_privileged("registering the application's memory") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dp = DatapathProcess::start(&bed, &[]).unwrap();
    let mut consumer = Consumer::connect(&dp.socket, WAIT).unwrap();
    // The application's memory: a memfd of its own that allows sealing, which it maps itself
    // before registering its first 256 KiB; the page after them is the application's alone.
    let len = WRITES * LEN as u64;
    let fd = memfd("application-buffer", len + 4096, true);
    let own =
        SharedMemory::map_file(fd.try_clone().unwrap(), len + 4096, Access::ReadWrite).unwrap();
    assert!(own.write(len, b"beyond the region"));
    assert_eq!(seals(fd.as_fd()), SealFlag::empty());
    let info = consumer
        .register_region(fd.as_fd(), len, PD, true, false)
        .unwrap();
    assert_eq!(
        (info.len, info.pd, info.remote_write, info.remote_read),
        (len, PD, true, false)
    );
    assert!(!info.huge_pages);
    // Sealed against resizing by the datapath, and nothing more: the application may still
    // seal it as it likes.
    assert_eq!(
        seals(fd.as_fd()),
        SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW
    );
    assert_eq!(consumer.regions(Some(PD)).unwrap(), vec![info.clone()]);

    let addr = SocketAddr::new(bed.addr_b(false), 7801);
    let listener = listen_in(&bed.ns_b, addr);
    let peer = writes_from_a(&bed, addr, info.stag, WRITES, LEN);
    let (flow, mut dpc, frozen) = hand_over(&bed, &dp.socket, &listener, false, true, Some(PD));
    peer.join().unwrap().unwrap();
    gone_cleanly(&mut dpc, flow);
    drop(frozen);
    let f = ended_flow(&mut dpc, flow);
    assert_eq!(f.rx.completions, WRITES, "{f:?}");
    let want: Vec<u8> = (0..LEN).map(|j| (j % 251) as u8).collect();
    let mut got = vec![0u8; LEN];
    for i in 0..WRITES {
        assert!(own.read(i * LEN as u64, &mut got));
        assert_eq!(got, want, "write {i} in the application's mapping");
    }
    let mut beyond = [0u8; 17];
    assert!(own.read(len, &mut beyond));
    assert_eq!(&beyond, b"beyond the region");

    // In the statistics: one region, registered, its octets within the region budget; the
    // datapath created no shared memory for it.
    let s = stats(&mut dpc);
    assert_eq!(
        (
            s.registry.regions,
            s.registry.region_octets,
            s.registry.registered_regions,
            s.registry.registered_octets
        ),
        (1, len, 1, len)
    );
    assert_eq!((s.memory.shared_files, s.memory.shared_bytes), (0, 0));

    // Destroyed: the datapath lets go of the mapping; the pages stay the application's.
    consumer.destroy_region(info.stag).unwrap();
    let t0 = Instant::now();
    while stats(&mut dpc).registry.registered_regions != 0 {
        assert!(t0.elapsed() < WAIT, "the region stays registered");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(own.read((WRITES - 1) * LEN as u64, &mut got));
    assert_eq!(got, want, "the last write after the region went");
    assert!(mpa_shm::resident_bytes(fd.as_fd()).unwrap() >= len);
}

/// `r` refused with exactly `code` and `message`.
#[track_caller]
fn refused<T: std::fmt::Debug>(r: Result<T, ConsumerError>, code: ErrorCode, message: &str) {
    match r {
        Err(ConsumerError::Client(ClientError::Refused {
            code: c,
            message: m,
        })) => {
            assert_eq!((c, m.as_str()), (code, message));
        }
        other => panic!("{code:?} \"{message}\" expected, got {other:?}"),
    }
}

/// The datapath's descriptors whose target starts with `prefix`.
fn held_by(dp: &DatapathProcess, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", dp.pid()))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.to_string_lossy().starts_with(prefix))
        .count()
}

#[test]
fn memory_that_cannot_be_registered_is_refused_with_the_reason_and_not_kept() {
    if !require_privileged("refused registrations") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dp = DatapathProcess::start(&bed, &[]).unwrap();
    let mut a = Consumer::connect(&dp.socket, WAIT).unwrap();
    let cannot = "the memory cannot be registered: ";

    // Not a memfd: a regular file, and a pipe.
    let not_memfd = format!(
        "{cannot}not a memfd: the descriptor's file takes no seals (F_GET_SEALS: EINVAL: \
         Invalid argument)"
    );
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("registered-memory-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.set_len(4096).unwrap();
    let unsealable = format!(
        "{cannot}the memfd may shrink or grow and takes no more seals: create it with \
         MFD_ALLOW_SEALING, or seal it with F_SEAL_SHRINK | F_SEAL_GROW"
    );
    // A file on tmpfs is shmem, as a memfd is, and shows seals (F_SEAL_SEAL from birth): it is
    // refused as one that cannot be sealed.
    let on_tmpfs = nix::sys::statfs::fstatfs(&file).unwrap().filesystem_type()
        == nix::sys::statfs::TMPFS_MAGIC;
    refused(
        a.register_region(file.as_fd(), 4096, PD, true, false),
        ErrorCode::BadRequest,
        if on_tmpfs { &unsealable } else { &not_memfd },
    );
    let (pipe_r, _pipe_w) = nix::unistd::pipe().unwrap();
    refused(
        a.register_region(pipe_r.as_fd(), 4096, PD, true, false),
        ErrorCode::BadRequest,
        &not_memfd,
    );
    // A memfd made without MFD_ALLOW_SEALING and not sealed: it could shrink under the
    // datapath's mapping.
    let fixed = memfd("refused-fixed", 4096, false);
    refused(
        a.register_region(fixed.as_fd(), 4096, PD, true, false),
        ErrorCode::BadRequest,
        &unsealable,
    );
    // Too short, and left unsealed by the refusal.
    let short = memfd("refused-short", 4096, true);
    refused(
        a.register_region(short.as_fd(), 8192, PD, true, false),
        ErrorCode::BadRequest,
        &format!("{cannot}the memfd holds 4096 octets, fewer than the 8192 to register"),
    );
    assert_eq!(seals(short.as_fd()), SealFlag::empty());
    // Without a descriptor: a client that sends the request alone.
    let mut raw = ControlClient::connect(&dp.socket, WAIT).unwrap();
    match raw.request(|id| Message::RegisterRegion {
        id,
        pd: PD + 1,
        len: 4096,
        remote_write: true,
        remote_read: false,
    }) {
        Err(ClientError::Refused { code, message }) => assert_eq!(
            (code, message.as_str()),
            (
                ErrorCode::BadRequest,
                "RegisterRegion carries no descriptor: attach the memfd to the message \
                 (SCM_RIGHTS)"
            )
        ),
        other => panic!("BadRequest expected, got {other:?}"),
    }

    // Another client's domain, by first use and by allocation.
    let region = a.create_region(4096, PD, true, false).unwrap();
    let mut b = Consumer::connect(&dp.socket, WAIT).unwrap();
    let good = memfd("refused-foreign", 4096, true);
    refused(
        b.register_region(good.as_fd(), 4096, PD, true, false),
        ErrorCode::Forbidden,
        &format!("protection domain {PD} belongs to another control client"),
    );
    let pd_b = b.alloc_pd().unwrap();
    refused(
        a.register_region(good.as_fd(), 4096, pd_b, true, false),
        ErrorCode::Forbidden,
        &format!("protection domain {pd_b} was not allocated to this control client"),
    );
    // Refusals in another client's domain come before the file is touched.
    assert_eq!(seals(good.as_fd()), SealFlag::empty());

    // The datapath kept none of them, and serves on: the good memfd in b's own domain.
    assert_eq!(held_by(&dp, &path.to_string_lossy()), 0);
    assert_eq!(held_by(&dp, "/memfd:refused-"), 0);
    let pipe_inode = nix::sys::stat::fstat(&pipe_r).unwrap().st_ino;
    assert_eq!(held_by(&dp, &format!("pipe:[{pipe_inode}]")), 0);
    let info = b
        .register_region(good.as_fd(), 4096, pd_b, true, false)
        .unwrap();
    assert_eq!(held_by(&dp, "/memfd:refused-foreign"), 1);
    let mut w = mpa_control::datapath_client::DatapathClient::connect(&dp.socket, WAIT).unwrap();
    assert_eq!(stats(&mut w).registry.registered_regions, 1);
    drop(b);
    // Its client gone, the registered region goes with it, and so does the descriptor.
    let t0 = Instant::now();
    while held_by(&dp, "/memfd:refused-foreign") != 0 {
        assert!(t0.elapsed() < WAIT, "region {:#x} kept", info.stag);
        std::thread::sleep(Duration::from_millis(20));
    }
    a.destroy_region(region.info().stag).unwrap();
    let _ = std::fs::remove_file(&path);
}
