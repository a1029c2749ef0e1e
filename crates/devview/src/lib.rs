//! The device files that RDMA middleware reads besides the verbs API, for the
//! softrdma host device, and the private mount namespace in which `softrdma
//! run` shows them to an unmodified program. Linux only.
//!
//! UCX requires `/dev/infiniband/<dev_name>` to be a character device it may
//! read and write (it never opens it), and reads GID types, the net device
//! behind each GID, the device's CPUs and NUMA node from
//! `/sys/class/infiniband/<dev>/`; NCCL and pyverbs read the same tree. A
//! software device has no kernel presence, so `softrdma run` gives a program
//! a mount namespace in which these paths exist.
//!
//! # Contract
//!
//! * [`DeviceView`] is a plain description (name, GUID, GID table with each
//!   GID's interface) and [`DeviceView::entries`] the files it becomes, as
//!   rdma_rxe's sysfs lays them out — pure, no I/O. The caller fills it from
//!   the device itself, so the files agree with what the libraries report.
//! * [`ns::enter`] moves the **calling process** into a new mount namespace
//!   (and a user namespace mapping its uid and gid to themselves when it is
//!   not root), then mounts tmpfs replicas over `/dev` and `/sys/class`: every
//!   real entry bind-mounted back (recursively, so `/dev/pts` and `/dev/shm`
//!   are the host's), real `infiniband*` entries left out, and the generated
//!   ones added. Mount propagation is made one-way first, so nothing leaks
//!   into the caller's namespace. It must be called while the process has a
//!   single thread (the kernel refuses `unshare(CLONE_NEWUSER)` otherwise);
//!   every process the caller then starts inherits the view. The network
//!   namespace, uid and files are unchanged, so programs inside still share
//!   the host device with programs outside. Given a file to record it in,
//!   non-root callers share one user namespace: a live earlier caller's is
//!   joined if it maps exactly this uid and gid to themselves.
//! * Device nodes are bind mounts of `/dev/null`: user namespaces cannot
//!   create device nodes, and a node is only ever `stat`ed.
//! * Errors are [`std::io::Error`]s naming the step that failed; a failure
//!   after the namespace exists leaves the process in it with whatever was
//!   mounted (it is private to the process and its children).

mod ifnames;
pub mod ns;
mod view;

pub use ifnames::interface_of;
pub use view::{DeviceView, Entry, GidEntry};
