package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Spec is a parsed data spec, as the CLI's --data flag takes it:
//
//	synthetic[:SEED]   the generator with DefaultSynthetic(SEED); SEED defaults to 1
//	pairs[:SEED]       query-document pairs, DefaultPairs(SEED) (matching models)
//	words[:SEED]       context words and centre word, DefaultWords(SEED) (nce)
//	regress[:SEED]     dense features and real-valued targets, DefaultRegress(SEED) (linreg)
//	criteo:PATH        Criteo TSV or CSV, told apart by content
//	avazu:PATH         Avazu CSV
//	libsvm:PATH        libsvm, every index a sparse id
//	libsvm,dense=N:PATH  libsvm, indices 1..N dense features (see OpenLibsvm)
//	digits:PATH        digits CSV
//
// Files may be gzip-compressed. PATH is everything after the first colon,
// so it may hold colons itself.
type Spec struct {
	Kind  string // synthetic, pairs, words, regress, criteo, avazu, libsvm or digits
	Path  string // the file; empty for generators
	Seed  uint64 // generators only
	Dense int    // libsvm only: indices 1..Dense are dense features (Options.DenseDims)
}

// DefaultSeed is the generator's seed when a generator's spec names none.
const DefaultSeed = 1

// generators are the spec kinds that take a seed instead of a path.
var generators = map[string]func(uint64, Options) (Source, error){
	"synthetic": func(seed uint64, opts Options) (Source, error) {
		return asSource(NewSynthetic(DefaultSynthetic(seed), opts))
	},
	"pairs": func(seed uint64, opts Options) (Source, error) { return asSource(NewPairs(DefaultPairs(seed), opts)) },
	"words": func(seed uint64, opts Options) (Source, error) { return asSource(NewWords(DefaultWords(seed), opts)) },
	"regress": func(seed uint64, opts Options) (Source, error) {
		return asSource(NewRegress(DefaultRegress(seed), opts))
	},
}

// asSource keeps a failed constructor's nil pointer out of the interface.
func asSource[S Source](src S, err error) (Source, error) {
	if err != nil {
		return nil, err
	}
	return src, nil
}

var fileOpeners = map[string]func(string, Options) (Source, error){
	"criteo": OpenCriteo,
	"avazu":  OpenAvazu,
	"libsvm": OpenLibsvm,
	"digits": OpenDigits,
}

// ParseSpec parses a data spec. Errors are *SpecError.
func ParseSpec(spec string) (Spec, error) {
	kind, arg, hasArg := strings.Cut(spec, ":")
	if _, ok := generators[kind]; ok {
		if !hasArg {
			return Spec{Kind: kind, Seed: DefaultSeed}, nil
		}
		seed, err := strconv.ParseUint(arg, 10, 64)
		if err != nil {
			return Spec{}, &SpecError{Spec: spec, Reason: "the seed must be an unsigned decimal integer"}
		}
		return Spec{Kind: kind, Seed: seed}, nil
	}
	kind, dense, err := kindOptions(spec, kind)
	if err != nil {
		return Spec{}, err
	}
	if _, ok := fileOpeners[kind]; !ok {
		return Spec{}, &SpecError{Spec: spec, Reason: "unknown kind " + strconv.Quote(kind) +
			" (want synthetic[:SEED], pairs[:SEED], words[:SEED], regress[:SEED], criteo:PATH, avazu:PATH, libsvm[,dense=N]:PATH or digits:PATH)"}
	}
	if arg == "" {
		return Spec{}, &SpecError{Spec: spec, Reason: "missing path (want " + kind + ":PATH)"}
	}
	return Spec{Kind: kind, Path: arg, Dense: dense}, nil
}

// kindOptions splits libsvm's ",dense=N" off a spec's kind.
func kindOptions(spec, kind string) (string, int, error) {
	kind, opt, hasOpt := strings.Cut(kind, ",")
	if !hasOpt {
		return kind, 0, nil
	}
	v, ok := strings.CutPrefix(opt, "dense=")
	n, err := strconv.Atoi(v)
	if kind != "libsvm" || !ok || err != nil || n < 0 || n > MaxLibsvmDense {
		return "", 0, &SpecError{Spec: spec, Reason: fmt.Sprintf("only libsvm takes an option, dense=N with N in 0..%d (want libsvm,dense=N:PATH)", MaxLibsvmDense)}
	}
	return kind, n, nil
}

// MaxLibsvmDense bounds the dense columns of a libsvm spec.
const MaxLibsvmDense = 1 << 16

// String returns the spec in the form ParseSpec reads.
func (s Spec) String() string {
	if _, ok := generators[s.Kind]; ok {
		return s.Kind + ":" + strconv.FormatUint(s.Seed, 10)
	}
	if s.Dense > 0 {
		return s.Kind + ",dense=" + strconv.Itoa(s.Dense) + ":" + s.Path
	}
	return s.Kind + ":" + s.Path
}

// FIFO reports whether the spec reads a FIFO: a stream that goes by once,
// so that no second reader (an evaluation of the held-out split after
// training, another shard) can read it again.
func (s Spec) FIFO() bool {
	if s.Path == "" {
		return false
	}
	fi, err := os.Stat(s.Path)
	return err == nil && fi.Mode()&fs.ModeNamedPipe != 0
}

// Open opens a source for the spec; call it again for each pass or worker.
func (s Spec) Open(opts Options) (Source, error) {
	if gen, ok := generators[s.Kind]; ok {
		return gen(s.Seed, opts)
	}
	open, ok := fileOpeners[s.Kind]
	if !ok {
		return nil, &SpecError{Spec: s.String(), Reason: "unknown kind"}
	}
	if s.Dense > 0 {
		opts.DenseDims = s.Dense
	}
	return open(s.Path, opts)
}

// Open parses spec and opens it.
func Open(spec string, opts Options) (Source, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return s.Open(opts)
}

// Repeat returns a source that reopens its data whenever a pass ends, for
// training over more samples than a file holds. A pass's last batch may be
// short; the next call starts a new pass. The stream ends (io.EOF) only when
// a fresh pass has nothing in it. BadLines is the largest count of any one
// pass: every pass skips the same lines, so it counts distinct bad lines.
func Repeat(open func() (Source, error)) (Source, error) {
	return RepeatEpochs(open, nil)
}

// RepeatEpochs is Repeat that also calls onEpoch, when it is not nil, with
// the number of each pass (an epoch: 2, 3, ...) as it begins; pass 1 begins
// when RepeatEpochs returns.
func RepeatEpochs(open func() (Source, error), onEpoch func(epoch int)) (Source, error) {
	src, err := open()
	if err != nil {
		return nil, err
	}
	return &repeating{open: open, cur: src, schema: src.Schema(), epoch: 1, onEpoch: onEpoch}, nil
}

type repeating struct {
	open    func() (Source, error)
	cur     Source // nil once a reopen has failed
	schema  Schema
	bad     int64 // largest count of a finished pass
	epoch   int   // the current pass, from 1
	onEpoch func(epoch int)
}

func (r *repeating) Schema() Schema { return r.schema }

func (r *repeating) BadLines() int64 {
	if r.cur == nil {
		return r.bad
	}
	return max(r.bad, r.cur.BadLines())
}

func (r *repeating) Close() error {
	if r.cur == nil {
		return nil
	}
	return r.cur.Close()
}

func (r *repeating) Next(ctx context.Context, size int) (*Batch, error) {
	if r.cur == nil {
		return nil, errors.New("data: repeat: the source could not be reopened")
	}
	b, err := r.cur.Next(ctx, size)
	if !errors.Is(err, io.EOF) {
		return b, err
	}
	if err := r.nextPass(); err != nil {
		return nil, err
	}
	return r.cur.Next(ctx, size)
}

// nextPass closes the pass that ended and opens the next.
func (r *repeating) nextPass() error {
	r.bad = max(r.bad, r.cur.BadLines())
	err := r.cur.Close()
	r.cur = nil
	if err != nil {
		return fmt.Errorf("data: repeat: %w", err)
	}
	if r.cur, err = r.open(); err != nil {
		r.cur = nil
		return fmt.Errorf("data: repeat: reopen: %w", err)
	}
	r.epoch++
	if r.onEpoch != nil {
		r.onEpoch(r.epoch)
	}
	return nil
}
