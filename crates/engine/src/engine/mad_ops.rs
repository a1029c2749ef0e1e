//! The engine's command boundary for libibumad: MAD ports, agents and
//! sends (`umad_open_port`, `umad_register`, `umad_send`, ...), each run
//! under the engine lock on [`MadAgents`](crate::mad::MadAgents), then
//! followed by the usual framing and transmit of what it queued.

use super::Engine;
use crate::mad::{Errno, Mad, MadPort, MadRegistration};
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

impl Engine {
    /// A new MAD port (`umad_open_port`): a queue with an eventfd.
    pub fn mad_open_port(&self) -> io::Result<Arc<MadPort>> {
        MadPort::new().map(Arc::new)
    }

    /// Unregisters every agent of `port` (`umad_close_port`).
    pub fn mad_close_port(&self, port: &Arc<MadPort>) {
        self.with_mad(|m, _| m.close(port));
    }

    /// Registers an agent on `port` (`umad_register`, `umad_register_oui`).
    pub fn mad_register(&self, port: &Arc<MadPort>, reg: MadRegistration) -> Result<u32, Errno> {
        self.with_mad(|m, _| m.register(port, reg))
    }

    /// Unregisters agent `id` of `port` (`umad_unregister`).
    pub fn mad_unregister(&self, port: &Arc<MadPort>, id: u32) -> Result<(), Errno> {
        self.with_mad(|m, _| m.unregister(port, id))
    }

    /// Sends a MAD from agent `id` of `port` to QP1 at `dst`
    /// (`umad_send`), from the local address routing picks
    /// ([`Engine::source_for`]). A request with a non-zero `timeout` is
    /// sent again up to `retries` times, then handed back with `ETIMEDOUT`.
    pub fn mad_send(
        &self,
        port: &Arc<MadPort>,
        id: u32,
        dst: IpAddr,
        mad: &Mad,
        timeout: Duration,
        retries: u32,
    ) -> Result<(), Errno> {
        let src = self.source_for(dst);
        self.with_mad(|m, now| {
            m.send(
                now,
                port,
                id,
                (src, dst),
                Box::new(*mad),
                (timeout, retries),
            )
        })
    }

    fn with_mad<R>(
        &self,
        f: impl FnOnce(&mut crate::mad::MadAgents, softrdma_transport::Instant) -> R,
    ) -> R {
        self.with_core(|core, now| f(&mut core.mad, now))
    }
}
