//! CPU accounting of a transfer: whole-system CPU from `/proc/stat` and per-process CPU from
//! rusage.
//!
//! Why whole-system: on veth a kernel-TCP receiver's protocol work runs in softirq, mostly in
//! the *sender's* context, and a process's rusage does not see it; comparing processes alone
//! flatters the kernel. The whole-system figure is user + nice + system + irq + softirq summed
//! over all cores (idle, iowait and steal excluded), taken just before and just after one side's
//! transfer. It includes the sender and anything else the machine did meanwhile; both sides
//! carry the same sender, and rounds alternate, so the difference between sides is the
//! receivers'.

use anyhow::{anyhow, bail, Context, Result};

/// The aggregate `cpu` line of `/proc/stat`, in clock ticks (USER_HZ).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuTicks {
    pub(crate) user: u64,
    pub(crate) nice: u64,
    pub(crate) system: u64,
    pub(crate) idle: u64,
    pub(crate) iowait: u64,
    pub(crate) irq: u64,
    pub(crate) softirq: u64,
    pub(crate) steal: u64,
}

impl CpuTicks {
    /// Parses the first (`cpu `, all cores) line of a `/proc/stat` text.
    pub(crate) fn parse(proc_stat: &str) -> Result<CpuTicks> {
        let line = proc_stat
            .lines()
            .find(|l| l.starts_with("cpu "))
            .ok_or_else(|| anyhow!("/proc/stat has no aggregate \"cpu \" line"))?;
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse::<u64>())
            .collect::<Result<_, _>>()
            .with_context(|| format!("/proc/stat: {line:?}"))?;
        if f.len() < 8 {
            bail!("/proc/stat: {line:?} has {} fields, 8 expected", f.len());
        }
        Ok(CpuTicks {
            user: f[0],
            nice: f[1],
            system: f[2],
            idle: f[3],
            iowait: f[4],
            irq: f[5],
            softirq: f[6],
            steal: f[7],
        })
    }

    /// Reads `/proc/stat` now.
    pub(crate) fn now() -> Result<CpuTicks> {
        CpuTicks::parse(&std::fs::read_to_string("/proc/stat").context("read /proc/stat")?)
    }

    /// Busy ticks: user + nice + system + irq + softirq (guest time is inside user).
    pub(crate) fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq
    }

    /// Busy ticks from `self` until `later` (0 where a counter went backwards).
    pub(crate) fn busy_since(&self, later: &CpuTicks) -> u64 {
        later.busy().saturating_sub(self.busy())
    }
}

/// Clock ticks per second of `/proc/stat`.
pub(crate) fn ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&t| t > 0)
        .map_or(100.0, |t| t as f64)
}

/// The CPU of one side's transfer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CpuUse {
    /// Whole-system busy CPU seconds during the transfer.
    pub(crate) system: f64,
    /// The receiver process's CPU seconds (rusage: user + system).
    pub(crate) receiver: f64,
    /// The sender process's CPU seconds.
    pub(crate) sender: f64,
}

impl CpuUse {
    /// ns of CPU per octet carried.
    pub(crate) fn ns_per_octet(seconds: f64, octets: f64) -> f64 {
        if octets > 0.0 {
            seconds * 1e9 / octets
        } else {
            f64::NAN
        }
    }
}

/// A running measurement of whole-system busy time.
pub(crate) struct SystemCpu {
    start: CpuTicks,
}

impl SystemCpu {
    pub(crate) fn start() -> Result<SystemCpu> {
        Ok(SystemCpu {
            start: CpuTicks::now()?,
        })
    }

    /// Busy CPU seconds since `start`.
    pub(crate) fn seconds(&self) -> Result<f64> {
        Ok(self.start.busy_since(&CpuTicks::now()?) as f64 / ticks_per_second())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 40 900 7 3 11 2 0 0\n\
                        cpu0 50 2 20 450 3 1 5 1 0 0\n\
                        cpu1 50 3 20 450 4 2 6 1 0 0\n\
                        intr 12345\n";

    #[test]
    fn parses_the_aggregate_line() {
        let t = CpuTicks::parse(STAT).unwrap();
        assert_eq!(
            t,
            CpuTicks {
                user: 100,
                nice: 5,
                system: 40,
                idle: 900,
                iowait: 7,
                irq: 3,
                softirq: 11,
                steal: 2
            }
        );
        // Idle, iowait and steal are not busy.
        assert_eq!(t.busy(), 100 + 5 + 40 + 3 + 11);
    }

    #[test]
    fn busy_between_two_readings_counts_softirq_not_idle() {
        let a = CpuTicks::parse(STAT).unwrap();
        let b = CpuTicks::parse("cpu  110 5 45 1900 9 3 31 2 0 0\n").unwrap();
        assert_eq!(a.busy_since(&b), 10 + 5 + 20);
        // A counter that went backwards (e.g. a CPU hot-unplugged) gives 0, not a wrap.
        assert_eq!(b.busy_since(&a), 0);
    }

    #[test]
    fn rejects_what_is_not_proc_stat() {
        assert!(CpuTicks::parse("intr 1\n").is_err());
        assert!(CpuTicks::parse("cpu  1 2 3\n").is_err());
        assert!(CpuTicks::parse("cpu  1 2 x 4 5 6 7 8\n").is_err());
    }

    #[test]
    fn reads_this_machine() {
        let t = CpuTicks::now().unwrap();
        assert!(t.busy() + t.idle > 0);
        assert!(ticks_per_second() >= 1.0);
    }

    #[test]
    fn ns_per_octet() {
        assert_eq!(CpuUse::ns_per_octet(2.0, 1e9), 2.0);
        assert!(CpuUse::ns_per_octet(1.0, 0.0).is_nan());
    }
}
