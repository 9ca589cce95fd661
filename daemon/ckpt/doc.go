// Package ckpt reads and writes heterps checkpoints.
//
// A checkpoint file is in the safetensors layout, so that other tools (the
// Python safetensors package, PyTorch, numpy) can read it:
//
//	offset 0      8-byte little-endian unsigned header length N
//	offset 8      N bytes of JSON header, padded with spaces to a multiple of 8:
//	              {"__metadata__": {string: string, ...},
//	               "<tensor name>": {"dtype": "F32"|"I64", "shape": [d0, d1, ...],
//	                                  "data_offsets": [begin, end]}, ...}
//	offset 8+N    the data section: every tensor's raw little-endian elements,
//	              row-major, contiguous, begin/end relative to offset 8+N
//
// The writer lays tensors out as the reference implementation does — I64
// before F32 (largest element first, so each tensor is aligned to its element
// size), then by name — and writes byte-identical files for the same input.
// Metadata holds strings only; heterps's keys are KeyModel, KeyStep and
// KeyFormatVersion (NewMetadata), and callers add their own (optimiser
// hyper-parameters, say).
//
// Single-machine training (daemon/nn) writes one file per checkpoint with
// WriteFile. Parameter servers (daemon/ps) write one file per shard into a
// step directory and then a manifest (WriteManifest) that lists every file
// with its size and SHA-256; a directory without a manifest is incomplete,
// and LatestComplete skips it.
//
// Files are written atomically (temporary file in the same directory, fsync,
// rename, fsync of the directory) and streamed, never built in memory. The
// reader treats a file as hostile: the header length is capped before
// anything is allocated, the JSON header is parsed strictly, the tensors must
// tile the data section exactly, and each tensor is read from its own byte
// range only.
package ckpt
