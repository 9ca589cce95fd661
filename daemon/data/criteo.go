package data

import "bytes"

// Criteo records: a 0/1 label, 13 integer features I1..I13 and 26
// categorical features C1..C26 written as hexadecimal ids.
const (
	criteoDense  = 13
	criteoSlots  = 26
	criteoFields = 1 + criteoDense + criteoSlots
)

var criteoColumns = append(append([]string{"label"}, columnNames("I", criteoDense)...), columnNames("C", criteoSlots)...)

// OpenCriteo opens a Criteo file, plain or gzip-compressed, in either form:
// the raw release (tab-separated, no header) or CSV whose first line may be a
// header. The first line decides: a tab means TSV, otherwise CSV; a first
// field that is not a number marks a header, which must have 40 columns.
//
// Dense features are log(1+x) of I1..I13 (negative values clamped to 0, empty
// is 0). Slot s holds one id, HashID(s, C(s+1), vocab); an empty C column is
// hashed as the empty string. A line is malformed when it does not have 40
// fields, its label is not 0 or 1, an integer is not a number, or a non-empty
// categorical value is not 1 to 16 hex digits.
func OpenCriteo(path string, opts Options) (Source, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	schema := Schema{NumDense: criteoDense, Slots: criteoSlots, Vocab: opts.Vocab, Task: TaskCTR}
	src, err := openFile(path, &criteoFormat{vocab: opts.Vocab}, schema, opts)
	if err != nil {
		return nil, err
	}
	return src, nil
}

type criteoFormat struct {
	sep    byte
	vocab  int64
	fields [][]byte
}

func (c *criteoFormat) begin(first []byte) (bool, *fieldError) {
	c.sep = ','
	if bytes.IndexByte(first, '\t') >= 0 {
		c.sep = '\t'
	}
	c.fields = splitFields(first, c.sep, c.fields)
	if !isHeaderField(c.fields[0]) {
		return false, nil
	}
	if len(c.fields) != criteoFields {
		return true, badField("", "header has %d columns, want %d", len(c.fields), criteoFields)
	}
	return true, nil
}

func (c *criteoFormat) parse(line []byte, rec *record) *fieldError {
	f := splitFields(line, c.sep, c.fields)
	c.fields = f
	if len(f) != criteoFields {
		return badField("", "%d fields, want %d", len(f), criteoFields)
	}
	var ferr *fieldError
	if rec.label, ferr = clickLabel(criteoColumns[0], f[0]); ferr != nil {
		return ferr
	}
	for j := range criteoDense {
		if rec.dense[j], ferr = countFeature(criteoColumns[1+j], f[1+j]); ferr != nil {
			return ferr
		}
	}
	for s := range criteoSlots {
		col := 1 + criteoDense + s
		v := f[col]
		if len(v) > 0 && !isHexID(v) {
			return badField(criteoColumns[col], "%q is not a hex id", v)
		}
		rec.ids = append(rec.ids, HashID(s, v, c.vocab))
		rec.endBag()
	}
	return nil
}
