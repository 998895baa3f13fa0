"""The C boundary: the cffi build of the library's API (_build), loading the
compiled module and mapping C error codes to exceptions (_ffi), and the
registry of layers, workloads and presets as the C library declares them
(schema). Every other room reaches C through here."""
