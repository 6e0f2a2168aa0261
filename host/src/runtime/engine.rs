//! The one wasmtime `Engine` of the process and its epoch ticker.

use super::limits::{EPOCH_TICK, Limits};
use anyhow::Result;
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
};

/// Bytes of each instance's linear memory (and, a sixteenth, of its tables)
/// reset in place rather than given back to the kernel.
const KEEP_RESIDENT: usize = 1 << 20;

/// Builds the engine. `instances` bounds how many provider instances can be alive
/// at once (requests in flight plus open terminals); slots are pre-reserved by the
/// pooling allocator, which makes instantiation a few microseconds.
pub fn build(limits: &Limits, instances: u32) -> Result<Engine> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.cranelift_opt_level(OptLevel::Speed);
    config.max_wasm_stack(1 << 20);
    // Reserve only what the memory cap allows: with hundreds of slots the default
    // 4 GiB reservation each would be terabytes of address space.
    let max_memory = limits.max_memory_bytes;
    config.memory_reservation(max_memory as u64);
    config.memory_guard_size(64 << 10);

    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(8))
        .total_memories(instances.saturating_mul(2))
        .total_tables(instances.saturating_mul(4))
        .total_stacks(instances)
        .max_memory_size(max_memory)
        .max_unused_warm_slots(16);
    // Resetting an instance's memory with madvise costs a syscall, a TLB flush
    // and ~9 page faults on the next request (bench/profiling.md, issue 24).
    // Where the kernel can report which pages are resident (PAGEMAP_SCAN,
    // Linux 6.7+), the first MiB (the guest's stack and the pages a request
    // touches) is reset in place instead: no fault, −15 % CPU per call.
    // Without it the reset would be a memset of the whole MiB: keep madvise.
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.pagemap_scan(Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT / 16);
    }
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = on_one_cpu(|| Engine::new(&config))?;
    start_epoch_ticker(&engine);
    Ok(engine)
}

/// Runs `f` on a thread of its own that may use only one of this process's
/// CPUs, and returns what it returned.
///
/// Why the engine is built there: wasmtime 48 splits the pool's slots into one
/// shard per CPU the building thread may use (`available_parallelism`, up to
/// 16), and each thread takes slots from a shard of its own first. A slot,
/// once used, keeps the guest's data image mapped (~84 KiB here), so with two
/// runtime workers 256 calls at once used 270–330 slots, 2–6 MiB more than one
/// shard's 256 (bench/profiling.md, issue 24). One shard costs a lock shared
/// by all workers, held for a slot's pop or push. No other knob of wasmtime
/// 48 sets the shard count; the calling thread's own affinity is not changed.
fn on_one_cpu<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("engine-build".into())
            .spawn_scoped(scope, || {
                restrict_to_one_cpu();
                f()
            })
            .expect("spawning the engine's builder thread")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Limits the calling thread to the first CPU it may use. Failing that, the
/// pool is sharded as wasmtime chooses, which costs memory, not correctness.
#[cfg(target_os = "linux")]
fn restrict_to_one_cpu() {
    // SAFETY: `set` is a plain bit set owned here; both calls only read or
    // write it and act on the calling thread (pid 0).
    unsafe {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut set) != 0 {
            return;
        }
        let Some(first) = (0..libc::CPU_SETSIZE as usize).find(|&cpu| libc::CPU_ISSET(cpu, &set))
        else {
            return;
        };
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(first, &mut set);
        libc::sched_setaffinity(0, size, &set);
    }
}

#[cfg(not(target_os = "linux"))]
fn restrict_to_one_cpu() {}

/// Advances the epoch every `EPOCH_TICK` so running guests yield to other tasks
/// and their CPU budget can be counted.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("epoch-ticker".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch ticker");
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::on_one_cpu;
    use std::thread::available_parallelism;

    #[test]
    fn the_engine_is_built_where_one_cpu_is_seen_and_the_caller_keeps_its_cpus() {
        let before = available_parallelism().unwrap();
        let seen = on_one_cpu(|| available_parallelism().unwrap().get());
        assert_eq!(seen, 1, "the builder thread should see one CPU");
        assert_eq!(
            available_parallelism().unwrap(),
            before,
            "the caller's CPUs changed"
        );
    }

    #[test]
    fn a_panic_in_the_builder_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| on_one_cpu(|| panic!("boom")));
        assert!(caught.is_err());
    }
}
