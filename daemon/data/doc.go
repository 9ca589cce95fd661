// Package data turns training data into mini-batches for the model layers:
// streaming readers for Criteo (raw TSV and CSV with a header), Avazu CSV,
// libsvm and the digits CSV; a synthetic click-through generator whose
// logistic ground truth is known, so trained models can be compared with the
// Bayes-optimal AUC; generators of query/document pairs ("pairs", for
// two-tower matching models) and of a Zipfian word corpus with planted
// structure ("words", for NCE word-embedding models); a regression generator
// with a planted linear model and Gaussian noise of known variance
// ("regress", so a trained model's MSE and R² can be compared with the
// optimum); AUC, accuracy, MSE and R²; and the record-selection rules every
// source shares (sharding across workers, a train/eval hold-out split).
//
// # Records and selection
//
// Every source numbers its records 0, 1, 2, ... in stream order: for a file,
// its data lines (header and empty lines excluded, malformed lines included),
// for the generator, the samples it would draw. A source emits record i when
// all of these hold:
//
//   - sharding: i mod Shards == Shard (worker k of K sees every K-th record,
//     so the K workers' streams are disjoint and together cover the data);
//   - hold-out: the split rule in [IsEval] puts i in the requested split;
//   - limit: i < Limit, when a limit is set;
//   - start: i >= Start (a reader that resumes where a stage had got to;
//     Options.After computes such positions).
//
// Lines that a worker does not own are not parsed, so a malformed line is
// reported by the worker that owns it.
//
// # Features
//
// Categorical values are hashed per slot with [HashID] (FNV-1a 64 over the
// slot number and the value's bytes, modulo the vocabulary). An empty
// categorical value is hashed like any other, as the empty string, so each
// slot has its own "missing" id and every Criteo or Avazu bag holds exactly
// one id. Integer features become log(1+x); negative integers are clamped to
// 0 first (as DLRM does), and an empty integer is 0. Avazu has 22 slots
// (the hour of the day, then its 21 categorical columns) and no dense
// features: the zoo's avazu model reads it. Libsvm has one slot: indices
// above N ("libsvm,dense=N:PATH") are its ids, whose values only mark
// presence, and indices 1..N are dense features whose values are used as
// they are ([OpenLibsvm]).
//
// # Bad input
//
// A malformed line is a *[LineError] naming the file, the 1-based line and
// the field. With Options.SkipBadLines such lines are skipped and counted
// instead ([Source.BadLines]). A line longer than 1 MiB is a LineError
// that ends the stream even then: skipping it would mean reading on to the
// next newline, which an endless stream without one never has.
//
// # Files and pipes
//
// A data path must be a regular file or a FIFO (a pipe feeding data);
// directories and devices (/dev/zero is an endless line) are refused when
// the source is opened. A FIFO is opened by the first Next, which waits for
// a writer; every Next's blocking read, and that wait, end when its context
// does, after which the stream is over (what the cut-off read had taken is
// lost) and Next returns the context's error. A FIFO's lines go to
// whichever reader takes them, so it cannot be sharded: opening one with
// Options.Shards > 1 is refused.
//
// # Reading ahead
//
// [Prefetch] and [PrefetchBatches] prepare the next items on a goroutine of
// their own while the caller trains on the current one: the same items in
// the same order, the error that ended the reading after the items before
// it, and a Close that stops and waits for the goroutine, which its opener
// calls before closing the source.
package data
