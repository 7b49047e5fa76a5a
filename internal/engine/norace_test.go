//go:build !race

package engine

// raceEnabled reports a build with the race detector: statistical tests that only count
// tokens, not interleavings, leave it out.
const raceEnabled = false
