// Package nn holds heterps' layers, losses, optimisers and models, built on
// a native.Backend. A model is a list of layers from a config.Model; layers
// pass Activations: one or more [rows x width] parts side by side, so that
// concatenation (embeddings next to dense features) costs no copy — the FC
// layer that consumes the parts multiplies each by its own slice of the
// weight matrix.
//
// A Model instance is owned by one goroutine: layers keep the tensors of the
// last forward pass for the backward pass. On a CPU backend of two or more
// threads, a backward pass and Trainer.Step run the work nothing later in
// the pass reads (weight gradients, then each layer's update) on a side lane
// of their own with half the threads, drained before they return; results
// equal the serial order's, and runs at equal thread counts are
// bit-identical.
package nn
