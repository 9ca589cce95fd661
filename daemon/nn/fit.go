package nn

import (
	"fmt"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
)

// CheckData reports, before any step runs, whether data with schema s can
// feed model m: the sparse slots its embedding layers read, the dense
// features it takes, the class ids its output has room for, and labels of
// the kind its loss reads. A regression model (linreg) may train on 0/1
// click labels: that is a linear-probability model.
func CheckData(m *config.Model, s data.Schema) error {
	in := m.Input
	switch {
	case in.Slots > s.Slots:
		return fmt.Errorf("model %s reads %d sparse slots; the data has %d", m.Name, in.Slots, s.Slots)
	case in.Dense > 0 && in.Dense != s.NumDense:
		return fmt.Errorf("model %s takes %d dense features; the data has %d", m.Name, in.Dense, s.NumDense)
	case in.Classes > 0 && s.NumClasses > in.Classes:
		return fmt.Errorf("model %s has %d classes; the data has %d", m.Name, in.Classes, s.NumClasses)
	case (m.Task == "classify" || m.Task == "nce") && s.Task != data.TaskClassify:
		return fmt.Errorf("model %s (task %s) needs a class per sample; the data's labels are %s", m.Name, m.Task, s.Task)
	case m.Task == "ctr" && s.Task == data.TaskRegress:
		return fmt.Errorf("model %s (task ctr) needs 0/1 labels; the data's are real-valued regression targets", m.Name)
	}
	return nil
}
