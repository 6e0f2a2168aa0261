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
    let engine = Engine::new(&config)?;
    start_epoch_ticker(&engine);
    Ok(engine)
}

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
