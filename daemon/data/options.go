package data

import "fmt"

// Split selects records by the hold-out rule of IsEval.
type Split int

const (
	SplitAll   Split = iota // every record
	SplitTrain              // records IsEval rejects
	SplitEval               // records IsEval accepts
)

func (s Split) String() string {
	switch s {
	case SplitAll:
		return "all"
	case SplitTrain:
		return "train"
	case SplitEval:
		return "eval"
	}
	return fmt.Sprintf("split(%d)", int(s))
}

// DefaultEvalFraction is the share of records held out for evaluation when
// Options.EvalFraction is 0.
const DefaultEvalFraction = 0.1

// Options configure every source. The zero value reads everything with the
// default vocabulary and stops at the first malformed line.
type Options struct {
	Vocab        int64   // hashed id space; 0 means DefaultVocab
	SkipBadLines bool    // skip and count malformed lines instead of failing
	Shard        int     // this worker, in [0, Shards)
	Shards       int     // workers sharing the stream; 0 or 1 means one
	Split        Split   // which side of the hold-out split to read
	EvalFraction float64 // share of records in the eval split; 0 means DefaultEvalFraction
	Limit        int64   // records with index >= Limit end the stream; 0 means no limit
	Start        int64   // records with index < Start are not emitted (a reader resuming mid-stream)
	DenseDims    int     // libsvm only: indices 1..DenseDims are dense features
}

func (o Options) withDefaults() (Options, error) {
	if o.Vocab == 0 {
		o.Vocab = DefaultVocab
	}
	if o.Shards == 0 {
		o.Shards = 1
	}
	if o.EvalFraction == 0 {
		o.EvalFraction = DefaultEvalFraction
	}
	switch {
	case o.Vocab < 0:
		return o, fmt.Errorf("data: vocabulary %d, want > 0", o.Vocab)
	case o.Shards < 0 || o.Shard < 0 || o.Shard >= o.Shards:
		return o, fmt.Errorf("data: shard %d of %d, want 0 <= shard < shards", o.Shard, o.Shards)
	case o.Split < SplitAll || o.Split > SplitEval:
		return o, fmt.Errorf("data: unknown split %d", int(o.Split))
	case !(o.EvalFraction > 0 && o.EvalFraction < 1):
		return o, fmt.Errorf("data: eval fraction %g, want in (0, 1)", o.EvalFraction)
	case o.Limit < 0 || o.Start < 0:
		return o, fmt.Errorf("data: limit %d, start %d, want >= 0", o.Limit, o.Start)
	case o.DenseDims < 0:
		return o, fmt.Errorf("data: %d dense dims, want >= 0", o.DenseDims)
	}
	return o, nil
}

// keeps reports whether record i belongs to this worker and split.
func (o Options) keeps(i int64) bool {
	if i < o.Start || i%int64(o.Shards) != int64(o.Shard) {
		return false
	}
	switch o.Split {
	case SplitTrain:
		return !IsEval(i, o.EvalFraction)
	case SplitEval:
		return IsEval(i, o.EvalFraction)
	}
	return true
}

// After returns the index just past the n-th record (n >= 1) that a
// source with these options emits, or Start when n is 0: where that
// reader has got to after n records. It counts by the selection rules
// alone, reading no data, and ignores Limit and the end of the data.
func (o Options) After(n int64) (int64, error) {
	o, err := o.withDefaults()
	if err != nil {
		return 0, err
	}
	i := o.Start
	if n <= 0 {
		return i, nil
	}
	k := int64(o.Shards)
	i += ((int64(o.Shard)-i)%k + k) % k // the first index of the shard
	for ; ; i += k {
		if o.keeps(i) {
			if n--; n == 0 {
				return i + 1, nil
			}
		}
	}
}

// past reports whether record i lies beyond the limit.
func (o Options) past(i int64) bool { return o.Limit > 0 && i >= o.Limit }

// IsEval is the hold-out rule: record i is held out for evaluation when
// mix64(i) / 2^64 < fraction, where mix64 is splitmix64's finaliser. It
// depends on the record's index only, so every reader and the generator
// split the same way, and the rule is independent of sharding.
func IsEval(i int64, fraction float64) bool {
	return float64(mix64(uint64(i))>>11)*0x1p-53 < fraction
}
