//! Per-instance limits: linear memory, CPU time per call, and how hitting
//! them is reported (E9001, naming the flag to change).

/// Which limit stopped a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitHit {
    #[error(
        "the provider tried to use more than {cap_mib} MiB of memory and was stopped (raise --max-memory-mib)"
    )]
    Memory { cap_mib: u64 },
    #[error(
        "the provider used more than {budget_ms} ms of CPU in one call and was stopped (raise --cpu-budget-ms)"
    )]
    Cpu { budget_ms: u64 },
}

/// Limits applied to every instance.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_memory_bytes: usize,
    /// In epoch ticks (see `EPOCH_TICK`).
    pub cpu_budget_ticks: u64,
}

/// How often the epoch advances.
pub const EPOCH_TICK: std::time::Duration = std::time::Duration::from_millis(10);

impl Limits {
    pub fn new(max_memory_mib: u64, cpu_budget_ms: u64) -> Limits {
        Limits {
            max_memory_bytes: (max_memory_mib as usize) << 20,
            cpu_budget_ticks: (cpu_budget_ms / EPOCH_TICK.as_millis() as u64).max(1),
        }
    }

    pub fn memory_hit(&self) -> LimitHit {
        LimitHit::Memory {
            cap_mib: (self.max_memory_bytes >> 20) as u64,
        }
    }

    pub fn cpu_hit(&self) -> LimitHit {
        LimitHit::Cpu {
            budget_ms: self.cpu_budget_ticks * EPOCH_TICK.as_millis() as u64,
        }
    }
}

/// Refuses memory growth beyond the cap with a trap that says why, and
/// remembers how far the instance's memory grew.
pub struct MemoryLimiter {
    pub limits: Limits,
    /// The largest size a memory of the instance was allowed to grow to.
    pub grown_to: usize,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.max_memory_bytes {
            return Err(wasmtime::Error::new(self.limits.memory_hit()));
        }
        self.grown_to = self.grown_to.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}
