//go:build !race

package chat

// raceEnabled reports a build with the race detector, whose shadow memory cannot live under
// an address-space limit: its workers are held by the heap watch alone.
const raceEnabled = false
