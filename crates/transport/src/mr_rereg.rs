//! Re-registration (`ibv_rereg_mr`): a region changes its protection domain,
//! its memory (translation) or its rights in place and keeps its keys, so
//! peers that hold the R_Key keep using it.

use crate::Endpoint;
use crate::error::{VerbsError, inval};
use crate::mr::{Mr, PdHandle};
use crate::types::Access;

/// What an `ibv_rereg_mr` changes (`None`: keep).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rereg {
    /// New protection domain.
    pub pd: Option<PdHandle>,
    /// New memory: (host address, length, I/O virtual address).
    pub translation: Option<(u64, u64, u64)>,
    /// New rights.
    pub access: Option<Access>,
}

impl Endpoint {
    /// Changes a registered region in place; the keys stay the same. All
    /// checks run first, so a refused change leaves the region as it was.
    pub fn rereg_mr(&mut self, key: u32, r: Rereg) -> Result<Mr, VerbsError> {
        let old = self
            .query_mr(key)
            .ok_or_else(|| VerbsError::NotFound(format!("MR key {key:#x}")))?;
        let access = r.access.unwrap_or(old.access);
        if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
            && !access.contains(Access::LOCAL_WRITE)
        {
            return inval("REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE");
        }
        let (host, length, iova) = r.translation.unwrap_or((old.host, old.length, old.iova));
        if length == 0 || iova.checked_add(length).is_none() || host.checked_add(length).is_none() {
            return inval("region empty or wrapping around the address space");
        }
        if let Some(pd) = r.pd
            && pd != old.pd
        {
            self.pd_acquire(pd)?;
            self.pd_release(old.pd);
        }
        let mr = self.mrs.get_mut(key).expect("looked up above");
        mr.pd = r.pd.unwrap_or(old.pd);
        mr.access = access;
        if r.translation.is_some() || access.contains(Access::ON_DEMAND) {
            // New memory is not the memfd's, and on-demand memory is the
            // application's to unmap (the engine unshares the old pages).
            mr.share = None;
        }
        mr.host = host;
        mr.length = length;
        mr.iova = iova;
        Ok(*mr)
    }
}
