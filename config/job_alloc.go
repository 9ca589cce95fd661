package config

import "strings"

// validateAlloc checks the fields the coordinator's allocator reads.
func (j *Job) validateAlloc(loc *Locator, errs *errorList) {
	if !finite(j.Priority) || j.Priority < 0 {
		errs.add(loc.Errorf("priority", "must be a finite number > 0, got %g", j.Priority))
	}
	if !finite(j.TargetLossReduction) || j.TargetLossReduction < 0 || j.TargetLossReduction > 1 {
		errs.add(loc.Errorf("target_loss_reduction", "must be in (0, 1], got %g", j.TargetLossReduction))
	}
	if strings.TrimSpace(j.Trace) != j.Trace || strings.ContainsRune(j.Trace, 0) {
		errs.add(loc.Errorf("trace", "%q is not a usable path", j.Trace))
	}
}

// JobPriority is the job's priority: 1 when the file gives none.
func (j *Job) JobPriority() float64 {
	if j.Priority > 0 {
		return j.Priority
	}
	return 1
}
