package main

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestParsePasses(t *testing.T) {
	got, err := parsePasses("cpu-2t:1; cpu-1t:2,4")
	if err != nil {
		t.Fatal(err)
	}
	want := []pass{{unit: "cpu-2t", nodes: []int{1}}, {unit: "cpu-1t", nodes: []int{2, 4}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsePasses = %+v, want %+v", got, want)
	}
	if got, err := parsePasses(""); err != nil || got != nil {
		t.Fatalf("parsePasses(\"\") = %v, %v", got, err)
	}
	for _, bad := range []string{"cpu-2t", ":1", "cpu-2t:0", "cpu-2t:x"} {
		if _, err := parsePasses(bad); err == nil {
			t.Errorf("parsePasses(%q) accepted", bad)
		}
	}
}

func TestRunPartsCopiesOutputAndStopsAtAFailure(t *testing.T) {
	var w bytes.Buffer
	err := runParts(context.Background(), [][]string{{"echo", "one"}, {"false"}, {"echo", "never"}}, &w)
	if err == nil || !strings.Contains(err.Error(), "false") {
		t.Fatalf("runParts error = %v, want the failing command named", err)
	}
	if w.String() != "one\n\n" {
		t.Fatalf("output %q", w.String())
	}
}
