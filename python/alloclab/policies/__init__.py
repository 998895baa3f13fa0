"""The policy language and what it builds: policy specs (policy), layers
compiled from C at run time (plugin, libarena_real), the peer allocators
(peers), and a live allocator stack driven one call at a time (allocator)."""
