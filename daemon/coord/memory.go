package coord

import "github.com/heterps/heterps/daemon/nn"

// checkMemory refuses, naming the numbers, a job that no live node could
// hold a stage replica of. Every layer runs on some replica, and a replica
// gets at most the batch split over every live unit, so the largest
// one-layer estimate at that batch (nn.EstimateStage: dense parameters,
// their optimiser state and gradients, activations, the batch's rows) is
// a floor that some node must hold. Nodes that report no memory, and a
// cluster without live nodes, are not checked. c.mu is held.
func (c *Coordinator) checkMemory(j *job) error {
	units, largest, name := 0, int64(0), ""
	for _, n := range c.nodes {
		if !n.alive() {
			continue
		}
		units += n.req.Units
		if n.req.MemoryBytes > largest {
			largest, name = n.req.MemoryBytes, n.req.Name
		}
	}
	if units == 0 || largest == 0 {
		return nil
	}
	jf := j.file
	batch := (jf.Batch + units - 1) / units
	micro := max(1, jf.MicroBatches)
	var need int64
	worst := 0
	for l := range j.model.Shapes() {
		b, err := nn.EstimateStage(j.model, l, l, batch, min(micro, batch))
		if err != nil {
			return jf.Errorf("model", "estimating layer %d's memory: %v", l, err)
		}
		if b > need {
			need, worst = b, l
		}
	}
	if need > largest {
		return jf.Errorf("batch", "a replica holding layer %d needs at least %d bytes at %d samples (batch %d over the %d live units), more than the largest live node (%s, %d bytes) has",
			worst, need, batch, jf.Batch, units, name, largest)
	}
	return nil
}
