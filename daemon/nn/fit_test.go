package nn

import (
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
)

func TestCheckDataMatchesZooModelsToTheirData(t *testing.T) {
	for _, tc := range []struct {
		model string
		s     data.Schema
		want  string // "" = fits
	}{
		{"ctrdnn", data.Schema{Slots: 26, NumDense: 13, Task: data.TaskCTR}, ""},
		{"ctrdnn", data.Schema{Slots: 22, Task: data.TaskCTR}, "reads 26 sparse slots; the data has 22"},
		{"ctrdnn", data.Schema{Slots: 26, NumDense: 4, Task: data.TaskCTR}, "takes 13 dense features; the data has 4"},
		{"mlp-digits", data.Schema{NumDense: 64, NumClasses: 10, Task: data.TaskClassify}, ""},
		{"mlp-digits", data.Schema{NumDense: 64, NumClasses: 1000, Task: data.TaskClassify}, "has 10 classes; the data has 1000"},
		{"nce", data.Schema{Slots: 4, Vocab: 100000, NumClasses: 100000, Task: data.TaskClassify}, ""},
		{"nce", data.Schema{Slots: 26, NumDense: 13, Task: data.TaskCTR}, "needs a class per sample; the data's labels are ctr"},
		{"mlp-digits", data.Schema{NumDense: 64, Task: data.TaskCTR}, "needs a class per sample"},
		{"linreg", data.Schema{NumDense: 13, Task: data.TaskRegress}, ""},
		{"linreg", data.Schema{NumDense: 13, Slots: 26, Task: data.TaskCTR}, ""},
		{"ctrdnn", data.Schema{Slots: 26, NumDense: 13, Task: data.TaskRegress}, "needs 0/1 labels"},
	} {
		m, err := config.LoadModel(tc.model)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckData(m, tc.s)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s on %+v: %v", tc.model, tc.s, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s on %+v: %v, want %q", tc.model, tc.s, err, tc.want)
		}
	}
}
