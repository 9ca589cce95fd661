package data

import "math"

// The digits data: 8x8 images of handwritten digits, one per line, as 64
// pixel intensities 0..16 followed by the class 0..9.
const (
	digitsPixels  = 64
	digitsClasses = 10
	digitsFields  = digitsPixels + 1
)

var digitsColumns = append(columnNames("pixel", digitsPixels), "class")

// OpenDigits opens the digits CSV, plain or gzip-compressed (a header line,
// recognised by a first field that is not a number, is skipped). The 64
// dense features are the pixels divided by 16, in [0, 1]; the class is in
// Batch.Classes and, as a number, in Batch.Labels. A line is malformed when it
// does not have 65 fields, a pixel is not a number in [0, 16], or the class
// is not an integer in [0, 9].
func OpenDigits(path string, opts Options) (Source, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	schema := Schema{NumDense: digitsPixels, NumClasses: digitsClasses, Task: TaskClassify}
	src, err := openFile(path, &digitsFormat{}, schema, opts)
	if err != nil {
		return nil, err
	}
	return src, nil
}

type digitsFormat struct{ fields [][]byte }

func (d *digitsFormat) begin(first []byte) (bool, *fieldError) {
	d.fields = splitFields(first, ',', d.fields)
	if !isHeaderField(d.fields[0]) {
		return false, nil
	}
	if len(d.fields) != digitsFields {
		return true, badField("", "header has %d columns, want %d", len(d.fields), digitsFields)
	}
	return true, nil
}

func (d *digitsFormat) parse(line []byte, rec *record) *fieldError {
	f := splitFields(line, ',', d.fields)
	d.fields = f
	if len(f) != digitsFields {
		return badField("", "%d fields, want %d", len(f), digitsFields)
	}
	for j := range digitsPixels {
		v, ok := parseNumber(f[j])
		if !ok || v < 0 || v > 16 {
			return badField(digitsColumns[j], "%q is not a number in [0, 16]", f[j])
		}
		rec.dense[j] = float32(v / 16)
	}
	c, ok := parseNumber(f[digitsPixels])
	if !ok || c != math.Trunc(c) || c < 0 || c >= digitsClasses {
		return badField("class", "%q is not a class 0..%d", f[digitsPixels], digitsClasses-1)
	}
	rec.class = int64(c)
	rec.label = float32(c)
	return nil
}
