//! sans-IO RoCEv2 transport: RC/UC/UD queue pair state machines (under construction).
