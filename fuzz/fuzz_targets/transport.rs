//! Fuzzes the transport: the input is a program of forged packets, raw
//! datagrams, work requests, deliveries (dropped, duplicated, reordered),
//! clock moves and (de)registrations run against two live endpoints with
//! RC, UC and UD QPs (`softrdma_sim::fuzz`). The harness panics if the
//! transport panics, touches memory outside a region registered at that
//! moment (with the rights the access needs), or changes any byte outside
//! such regions (guard zones, an unregistered buffer, read-only regions).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    softrdma_sim::fuzz::run(data);
});
