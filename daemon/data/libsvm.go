package data

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
)

// OpenLibsvm opens a libsvm file (plain or gzip) of binary examples:
//
//	label index:value index:value ...
//
// separated by spaces or tabs. The label is 0, 1, -1 or +1 (-1 means 0).
// Indices are 1-based integers. Features map to the model's input so:
//
//   - dense columns: with Options.DenseDims = D (the spec
//     "libsvm,dense=D:PATH", which must match the model's input.dense),
//     index i <= D sets dense feature i-1 to its value, as it is (absent
//     ones are 0). This is how a libsvm file's real-valued features reach
//     a model;
//   - sparse ids: every index i > D whose value is not 0 adds the id
//     (i-D-1) mod vocab to the single slot (input.slots = 1); its value
//     only says the feature is present, as a one-hot or multi-hot
//     categorical feature's 1 does. Put features whose values matter
//     among the first D indices.
//
// A sample without sparse indices has an empty bag. A line is malformed when its label is not one of
// those, or a feature is not index:value with a positive integer index and a
// number as value.
func OpenLibsvm(path string, opts Options) (Source, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	schema := Schema{NumDense: opts.DenseDims, Slots: 1, Vocab: opts.Vocab, Task: TaskCTR}
	src, err := openFile(path, &libsvmFormat{dense: int64(opts.DenseDims), vocab: opts.Vocab}, schema, opts)
	if err != nil {
		return nil, err
	}
	return src, nil
}

type libsvmFormat struct {
	dense int64
	vocab int64
}

func (*libsvmFormat) begin([]byte) (bool, *fieldError) { return false, nil }

func (l *libsvmFormat) parse(line []byte, rec *record) *fieldError {
	tok, rest := nextToken(line)
	v, ok := parseNumber(tok)
	if !ok || (v != 0 && v != 1 && v != -1) {
		return badField("label", "%q is not 0, 1, -1 or +1", tok)
	}
	rec.label = float32(max(v, 0))
	for k := 1; ; k++ {
		tok, rest = nextToken(rest)
		if len(tok) == 0 {
			break
		}
		if ferr := l.feature(tok, rec); ferr != nil {
			ferr.field = fmt.Sprintf("feature %d", k)
			return ferr
		}
	}
	rec.endBag()
	return nil
}

// feature decodes one index:value pair into rec.
func (l *libsvmFormat) feature(tok []byte, rec *record) *fieldError {
	colon := bytes.IndexByte(tok, ':')
	if colon < 0 {
		return badField("", "%q is not index:value", tok)
	}
	idx, err := strconv.ParseInt(string(tok[:colon]), 10, 64)
	if err != nil || idx < 1 {
		return badField("", "index %q is not a positive integer", tok[:colon])
	}
	v, ok := parseNumber(tok[colon+1:])
	if !ok {
		return badField("", "value %q is not a number", tok[colon+1:])
	}
	switch {
	case idx <= l.dense:
		rec.dense[idx-1] = float32(v)
	case v != 0:
		rec.ids = append(rec.ids, (idx-l.dense-1)%l.vocab)
	}
	return nil
}

// nextToken splits off the first run of non-blank bytes.
func nextToken(b []byte) (tok, rest []byte) {
	b = bytes.TrimLeft(b, " \t")
	end := bytes.IndexAny(b, " \t")
	if end < 0 {
		return b, nil
	}
	return b[:end], b[end:]
}

// WriteLibsvm writes a batch of at most one slot in the form OpenLibsvm
// reads with DenseDims = b.NumDense: non-zero dense feature j as index j+1,
// each id as index NumDense+1+id with value 1. Reading the output back gives
// the same batch, except that ids must be below the reader's vocabulary.
func WriteLibsvm(w io.Writer, b *Batch) error {
	if b.Slots > 1 {
		return fmt.Errorf("data: libsvm holds one slot, batch has %d", b.Slots)
	}
	bw := bufio.NewWriter(w)
	var line []byte
	for i := range b.Size {
		y := b.Labels[i]
		if y != 0 && y != 1 {
			return fmt.Errorf("data: libsvm: label %g of sample %d is not 0 or 1", y, i)
		}
		line = strconv.AppendInt(line[:0], int64(y), 10)
		for j, v := range b.Dense[i*b.NumDense : (i+1)*b.NumDense] {
			if v != 0 {
				line = fmt.Appendf(line, " %d:%s", j+1, strconv.FormatFloat(float64(v), 'g', -1, 32))
			}
		}
		if b.Slots == 1 {
			for _, id := range b.Bag(i, 0) {
				line = fmt.Appendf(line, " %d:1", int64(b.NumDense)+1+id)
			}
		}
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("data: libsvm: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("data: libsvm: %w", err)
	}
	return nil
}
