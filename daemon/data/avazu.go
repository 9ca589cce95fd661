package data

// Avazu columns: id, click, hour (YYMMDDHH), then 21 categorical columns.
var avazuColumns = []string{
	"id", "click", "hour", "C1", "banner_pos", "site_id", "site_domain", "site_category",
	"app_id", "app_domain", "app_category", "device_id", "device_ip", "device_model",
	"device_type", "device_conn_type", "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21",
}

const (
	avazuFirstCat = 3      // column of the first categorical feature
	avazuSlots    = 1 + 21 // the hour of the day, then the 21 categorical columns
)

// OpenAvazu opens an Avazu CSV file (plain or gzip), whose first line may be
// a header (recognised by a click column that is not a number; it must have
// 24 columns). The label is click; the id column is ignored. There are no
// dense features and 22 slots of one id each: slot 0 is the hour of the day
// (the HH of hour, hashed as its two digits), so that the model generalises
// across days, and slot k = 1..21 is HashID(k, column k+2, vocab), with
// empty values hashed as the empty string. Fields are not quoted.
func OpenAvazu(path string, opts Options) (Source, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	schema := Schema{Slots: avazuSlots, Vocab: opts.Vocab, Task: TaskCTR}
	src, err := openFile(path, &avazuFormat{vocab: opts.Vocab}, schema, opts)
	if err != nil {
		return nil, err
	}
	return src, nil
}

type avazuFormat struct {
	vocab  int64
	fields [][]byte
}

func (a *avazuFormat) begin(first []byte) (bool, *fieldError) {
	a.fields = splitFields(first, ',', a.fields)
	if len(a.fields) < 2 || !isHeaderField(a.fields[1]) {
		return false, nil
	}
	if len(a.fields) != len(avazuColumns) {
		return true, badField("", "header has %d columns, want %d", len(a.fields), len(avazuColumns))
	}
	return true, nil
}

func (a *avazuFormat) parse(line []byte, rec *record) *fieldError {
	f := splitFields(line, ',', a.fields)
	a.fields = f
	if len(f) != len(avazuColumns) {
		return badField("", "%d fields, want %d", len(f), len(avazuColumns))
	}
	var ferr *fieldError
	if rec.label, ferr = clickLabel("click", f[1]); ferr != nil {
		return ferr
	}
	hour := f[2]
	if !isHour(hour) {
		return badField("hour", "%q is not an hour YYMMDDHH", hour)
	}
	rec.ids = append(rec.ids, HashID(0, hour[6:], a.vocab))
	rec.endBag()
	for col := avazuFirstCat; col < len(f); col++ {
		rec.ids = append(rec.ids, HashID(col-avazuFirstCat+1, f[col], a.vocab))
		rec.endBag()
	}
	return nil
}

// isHour reports whether b is 8 digits ending in an hour of the day 00..23.
func isHour(b []byte) bool {
	if len(b) != 8 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return (b[6]-'0')*10+(b[7]-'0') <= 23
}
