//! A consumer's completions read on a thread of their own while a transfer runs (a consumer
//! must keep up with its ring), given back with the consumer when stopped, so that its regions
//! stay registered, their memory whole, until the caller has compared them.

use anyhow::{anyhow, Result};
use mpa_app::Consumer;
use mpa_ctl_proto::Completion;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The reading thread.
pub struct CompletionReader {
    thread: JoinHandle<Result<(Vec<Completion>, Consumer)>>,
    stop: Arc<AtomicBool>,
}

impl CompletionReader {
    /// Reads `consumer`'s completions from now on.
    pub fn start(mut consumer: Consumer) -> CompletionReader {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || -> Result<(Vec<Completion>, Consumer)> {
            let mut all = Vec::new();
            let mut quiet_since_stop = 0;
            loop {
                let deadline = Instant::now() + Duration::from_millis(100);
                match consumer.next_completions(deadline)? {
                    Some(b) => all.extend(b),
                    None if flag.load(Ordering::Relaxed) => {
                        quiet_since_stop += 1;
                        if quiet_since_stop >= 5 {
                            return Ok((all, consumer));
                        }
                    }
                    None => {}
                }
            }
        });
        CompletionReader { thread, stop }
    }

    /// Stops once no completion came for half a second after this call; every completion
    /// read, in order, and the consumer.
    pub fn finish(self) -> Result<(Vec<Completion>, Consumer)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("completion reader panicked"))?
    }
}
