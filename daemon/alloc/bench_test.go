package alloc

import (
	"fmt"
	"testing"
)

// BenchmarkAllocate times one decision for 1,000 jobs with fitted curves
// sharing 10,000 units (the target is under 10 ms).
func BenchmarkAllocate(b *testing.B) {
	jobs := make([]Job, 1000)
	for i := range jobs {
		jobs[i] = testJob(fmt.Sprintf("j%04d", i), 1+float64(i%7), 1e-3*float64(1+i%5), 0.1, float64(10*(i%50)))
		jobs[i].MaxUnits = 64
	}
	for _, p := range Policies() {
		b.Run(string(p), func(b *testing.B) {
			for b.Loop() {
				if _, err := Allocate(p, jobs, 10000, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
