package sot

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrSkeleton is wrapped by the errors of a skeleton that cannot be expanded.
var ErrSkeleton = errors.New("skeleton")

// ParseSkeleton reads the points of a skeleton "1. a\n2. b\n...": lines that begin with a
// number and "." or ")" (spaces around allowed) start points, whatever the numbers (they
// are renumbered in order), each with text; blank lines are skipped and a line without a
// number continues the point before it. The first MaxPoints points are kept; fewer than
// MinPoints, a point without text or text before the first point is an error wrapping
// ErrSkeleton.
func ParseSkeleton(text string) ([]string, error) {
	var points []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		n, rest, ok := numbered(line)
		switch {
		case ok && rest == "":
			return nil, fmt.Errorf("%w: point %d has no text", ErrSkeleton, n)
		case ok:
			points = append(points, rest)
		case len(points) == 0:
			return nil, fmt.Errorf("%w: text before point 1: %q", ErrSkeleton, line)
		default:
			points[len(points)-1] += " " + line
		}
	}
	if len(points) < MinPoints {
		return nil, fmt.Errorf("%w: %d points, want at least %d", ErrSkeleton, len(points), MinPoints)
	}
	return points[:min(len(points), MaxPoints)], nil
}

// numbered splits "12. text" or "12) text" into 12 and "text".
func numbered(line string) (int, string, bool) {
	i := 0
	for i < len(line) && i < 3 && line[i] >= '0' && line[i] <= '9' {
		i++
	}
	if i == 0 || i == len(line) || (line[i] != '.' && line[i] != ')') {
		return 0, "", false
	}
	if i+1 < len(line) && line[i+1] >= '0' && line[i+1] <= '9' {
		return 0, "", false // a decimal number such as 3.14
	}
	n, err := strconv.Atoi(line[:i])
	if err != nil {
		return 0, "", false
	}
	return n, strings.TrimSpace(line[i+1:]), true
}
