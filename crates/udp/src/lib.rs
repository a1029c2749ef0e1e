//! UDP socket layer of the softrdma engine: addressing, batching, GSO/GRO, wake-up fds (under construction).
