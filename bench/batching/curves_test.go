package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestWriteCurvesHasARowPerNewStepOfEveryRunThatRan(t *testing.T) {
	ok := &trace{part: partLevels, model: models["linreg"], sync: syncASP, level: 6, mode: "dynamic", started: t0,
		samples: jobSamples("j1", 0, t0.Add(time.Second), 0, 2, 2, 4)}
	ok.samples[3].batches = []int{30, 226}
	bad := &trace{model: models["ctrdnn"], err: errors.New("boom"), samples: jobSamples("j2", 0, t0, 1, 2)}
	var buf bytes.Buffer
	if err := writeCurves(&buf, []*trace{ok, bad}, options{emaWeight: 1}); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || !slices.Equal(rows[0], curvesHeader) {
		t.Fatalf("rows %q: want the header and steps 2 and 4 of the run that ran", rows)
	}
	want := []string{"levels", "linreg", "asp", "6", "dynamic", "", "j1", "4.000", "4", "4", "4", "0", "30", "226"}
	if !slices.Equal(rows[2], want) {
		t.Errorf("row %q, want %q", rows[2], want)
	}
}
