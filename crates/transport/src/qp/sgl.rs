//! Scatter/gather through local SGEs, each piece checked against the MR table.

use crate::Memory;
use crate::mr::{AccessError, Host, MrTable, PdHandle};
use crate::types::Access;
use crate::wr::Sge;

/// Why a scatter failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The data does not fit in the SGEs.
    TooLong,
    /// An SGE failed its protection check.
    Prot(AccessError),
}

/// Walks the SGE list from byte `offset`, calling `f(host, range, lkey)`
/// for each contiguous piece of `len` bytes; an error `f` returns ends the
/// walk. Returns the bytes not covered by the list.
/// Inlined: out of line (once `host_ranges` called it too), a SEND's scatter took 116
/// more instructions (BENCHMARKS.md, "Issue 16, outcome 6").
#[inline]
fn walk(
    mrs: &MrTable,
    pd: PdHandle,
    sgl: &[Sge],
    mut offset: u64,
    len: usize,
    need: Access,
    mut f: impl FnMut(Host, core::ops::Range<usize>, u32) -> Result<(), AccessError>,
) -> Result<usize, AccessError> {
    let mut done = 0usize;
    for s in sgl {
        if done == len {
            break;
        }
        let sl = u64::from(s.length);
        if offset >= sl {
            offset -= sl;
            continue;
        }
        let n = ((sl - offset) as usize).min(len - done);
        let va = s.addr.checked_add(offset).ok_or(AccessError::OutOfBounds)?;
        let host = mrs.check(s.lkey, pd, va, n as u64, need)?;
        f(host, done..done + n, s.lkey)?;
        done += n;
        offset = 0;
    }
    Ok(len - done)
}

/// Copies `data` into the SGEs starting at byte `offset` of the list (LOCAL_WRITE).
pub(crate) fn scatter(
    mrs: &MrTable,
    mem: &mut dyn Memory,
    pd: PdHandle,
    sgl: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), ScatterError> {
    // The common case, a message that lands in the first SGE: one check,
    // then the copy (the walk's two passes cost ~100 more instructions a
    // small SEND; callgrind of `ib_send_lat`, BENCHMARKS "The responder's
    // express path").
    if let Some(s) = sgl.first()
        && offset == 0
        && !data.is_empty()
        && data.len() as u64 <= u64::from(s.length)
    {
        let len = data.len() as u64;
        let host = mrs
            .check(s.lkey, pd, s.addr, len, Access::LOCAL_WRITE)
            .map_err(ScatterError::Prot)?;
        return host.write(mem, data).map_err(ScatterError::Prot);
    }
    let mut pass = |write: bool| {
        walk(
            mrs,
            pd,
            sgl,
            offset,
            data.len(),
            Access::LOCAL_WRITE,
            |h, r, _| match write {
                true => h.write(mem, &data[r]),
                false => Ok(()),
            },
        )
        .map_err(ScatterError::Prot)
    };
    // Check everything first so a failure writes nothing (but memory of an
    // on-demand-paging region unmapped midway, as on hardware).
    if pass(false)? != 0 {
        return Err(ScatterError::TooLong);
    }
    pass(true)?;
    Ok(())
}

/// Copies `out.len()` bytes from the SGEs starting at byte `offset` of the list.
pub(crate) fn gather(
    mrs: &MrTable,
    mem: &mut dyn Memory,
    pd: PdHandle,
    sgl: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> Result<(), AccessError> {
    let len = out.len();
    let left = walk(mrs, pd, sgl, offset, len, Access::EMPTY, |h, r, _| {
        h.read(mem, &mut out[r])
    })?;
    if left != 0 {
        return Err(AccessError::OutOfBounds);
    }
    Ok(())
}

/// Whether any SGE of the list names an on-demand-paging region.
pub(crate) fn any_on_demand(mrs: &MrTable, sgl: &[Sge]) -> bool {
    sgl.iter().any(|s| {
        mrs.get(s.lkey)
            .is_some_and(|m| m.access.contains(Access::ON_DEMAND))
    })
}

/// Total bytes an SGE list can hold.
pub(crate) fn capacity(sgl: &[Sge]) -> u64 {
    sgl.iter().map(|s| u64::from(s.length)).sum()
}

/// The host ranges of the first `len` bytes of the SGE list, each piece
/// checked for `need` (the peer copy's source or destination), and whether
/// any lies in an on-demand-paging region.
pub(crate) fn host_ranges(
    mrs: &MrTable,
    pd: PdHandle,
    sgl: &[Sge],
    len: u32,
    need: Access,
) -> Result<(softrdma_wire::PeerSegs, bool), ScatterError> {
    let mut out = softrdma_wire::PeerSegs::new();
    let mut on_demand = false;
    let left = walk(mrs, pd, sgl, 0, len as usize, need, |host, r, lkey| {
        on_demand |= host.on_demand;
        out.push(crate::PeerSeg {
            addr: host.addr,
            len: r.len() as u32,
            file: mrs.share_of(lkey),
        });
        Ok(())
    })
    .map_err(ScatterError::Prot)?;
    if left != 0 {
        return Err(ScatterError::TooLong);
    }
    Ok((out, on_demand))
}
