//! The registered memory of a connection: the [`Buffer`] the peer writes and
//! reads, and the message slots.

use crate::config::Config;
use crate::error::{Error, Result};
use softrdma::verbs::{Access, Mr, Pd, RemoteBuf, Sge};

/// The buffer of one side of a connection, registered once: the peer RDMA
/// WRITEs into it and READs from it; this side fills it before its own
/// [`crate::Connection::write`]s and finds the data of its
/// [`crate::Connection::read`]s in it.
///
/// Access goes through [`Buffer::read`] and [`Buffer::write`], which copy
/// under the device's lock, so a copy never races with the device. Which
/// ranges the peer may touch when is the application's protocol (that is
/// what notifications are for): rdmalib does not lock ranges.
#[derive(Debug)]
pub struct Buffer {
    mr: Mr,
}

impl Buffer {
    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.mr.len()
    }

    /// True for an empty buffer (never: the size is at least 1).
    pub fn is_empty(&self) -> bool {
        self.mr.is_empty()
    }

    /// Copies `dst.len()` bytes at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        Ok(self.mr.read(offset, dst)?)
    }

    /// Copies `src` into the buffer at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len())?;
        Ok(self.mr.write(offset, src)?)
    }

    /// A copy of `len` bytes at `offset`.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// What this side advertises to its peer: address, rkey, size.
    pub fn remote(&self) -> RemoteBuf {
        RemoteBuf {
            addr: self.mr.addr(),
            rkey: self.mr.rkey(),
            len: self.mr.len() as u64,
        }
    }

    /// Address of the first byte (for zero-copy users such as the C API,
    /// which hands it to C as `ctx->buffer`; see [`Mr::as_mut_slice`] for
    /// the rules of unsynchronized access).
    pub fn as_ptr(&self) -> *mut u8 {
        self.mr.addr() as *mut u8
    }

    /// The memory region.
    pub fn mr(&self) -> &Mr {
        &self.mr
    }

    pub(crate) fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::LocalOutOfBounds {
                offset,
                len,
                size: self.len(),
            }),
        }
    }

    pub(crate) fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        self.check(offset, len)?;
        Ok(self.mr.sge(offset, len)?)
    }
}

/// Everything a connection registers, once.
#[derive(Debug)]
pub(crate) struct Resources {
    pub(crate) buffer: Buffer,
    /// `recv_depth` slots of `max_message` bytes.
    pub(crate) recv: Mr,
    /// One slot of `max_message` bytes that messages are sent from.
    pub(crate) send: Mr,
    pub(crate) max_message: usize,
    pub(crate) recv_depth: usize,
}

impl Resources {
    pub(crate) fn new(pd: &Pd, config: &Config) -> Result<Resources> {
        config.check()?;
        let buffer = Buffer {
            mr: pd.alloc_mr(
                config.buffer_size,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )?,
        };
        let recv = pd.alloc_mr(config.recv_depth * config.max_message, Access::LOCAL_WRITE)?;
        let send = pd.alloc_mr(config.max_message, Access::LOCAL_WRITE)?;
        Ok(Resources {
            buffer,
            recv,
            send,
            max_message: config.max_message,
            recv_depth: config.recv_depth,
        })
    }

    /// The SGE of receive slot `i`.
    pub(crate) fn recv_sge(&self, i: usize) -> Result<Sge> {
        Ok(self.recv.sge(i * self.max_message, self.max_message)?)
    }
}
