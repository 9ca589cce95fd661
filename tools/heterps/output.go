package main

import (
	"io"

	"github.com/heterps/heterps/daemon/ckpt"
)

// writeWhole writes data to path as checkpoints are written: into a
// temporary file beside it, renamed over it once complete, so that a full
// disk or a kill in the middle leaves the file it replaces as it was (a
// profile's --out is often its --into, measured over minutes).
func writeWhole(path string, data []byte) error {
	return ckpt.WriteAtomic(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
