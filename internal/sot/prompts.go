// Package sot is Skeleton-of-Thought (Ning et al., 2023): the model first writes a short
// numbered skeleton of its answer, then every point is expanded as a sequence of its own,
// all in parallel in one engine, and the answer is the expansions in point order. The
// expansions' prompts share everything but their last few tokens, so after the first one's
// prefill the others take their prefix from the prefix cache.
//
// The prompts are this package's templates (below); the caller renders them with the
// model's chat template. The skeleton is held to the numbered-list shape by a regular
// expression (SkeletonRegex), so even a small model's skeleton parses; a skeleton that still
// does not (fewer than two points, cut by its length) falls back to the plain answer.
package sot

import (
	"fmt"
	"strings"
)

// Message is one chat message of a prompt.
type Message struct {
	Role, Content string
}

// Limits of the skeleton.
const (
	// MaxPoints is the most points a skeleton may have.
	MaxPoints = 10
	// MinPoints is the fewest points worth expanding in parallel.
	MinPoints = 2
	// SkeletonMaxTokens bounds the skeleton's generation.
	SkeletonMaxTokens = 200
	// DefaultPointTokens is each point's budget when the request gives no max_tokens.
	DefaultPointTokens = 128
)

// skeletonTemplate asks for the skeleton; %s is the question. The reply is begun with
// "1." (SkeletonPrefill), so that the model writes the list at once.
const skeletonTemplate = `Plan an answer to the question below. Write only its outline: a numbered list of 2 to 10 points, each a few words (3 to 5), one per line, and nothing else.

Question: %s`

// SkeletonPrefill is how the assistant's skeleton reply begins.
const SkeletonPrefill = "1."

// pointTemplate asks for one point's expansion; the verbs are the question, the whole
// skeleton, then the point's number. Everything before the number is the same in every
// expansion, so the expansions share their prompt's blocks but the last few.
const pointTemplate = `Question: %s

Outline of the answer:
%s

Write the text of one point of this outline: continue it in one to two short sentences, and write nothing about the other points. The point is number %d.`

// SkeletonMessages are the messages that ask for the skeleton: the conversation before the
// question, then the question wrapped in the skeleton template.
func SkeletonMessages(history []Message, question string) []Message {
	return append(cloneMessages(history), Message{Role: "user", Content: fmt.Sprintf(skeletonTemplate, question)})
}

// PointMessages are the messages that ask for point i (1-based) of points: the conversation
// before the question, then the point template. The reply begins with PointPrefill.
func PointMessages(history []Message, question string, points []string, i int) []Message {
	return append(cloneMessages(history), Message{Role: "user", Content: fmt.Sprintf(pointTemplate, question, FormatSkeleton(points), i)})
}

// PointPrefill is how the reply expanding point i (1-based) begins: the point as the
// skeleton has it, which the model continues.
func PointPrefill(points []string, i int) string {
	return fmt.Sprintf("%d. %s", i, points[i-1])
}

// FormatSkeleton writes points as the numbered list "1. a\n2. b".
func FormatSkeleton(points []string) string {
	lines := make([]string, len(points))
	for i, p := range points {
		lines[i] = fmt.Sprintf("%d. %s", i+1, p)
	}
	return strings.Join(lines, "\n")
}

// SkeletonRegex is the language of the skeleton's generation after SkeletonPrefill: " "
// and point 1's text, then one or more lines "N. text", each text of 1 to 40 characters (a
// few words: the bound also ends the line of a model that would never break it). The
// numbers are left free and the count of points unbounded (SkeletonMaxTokens bounds it):
// every bounded repetition is a copy of the automaton's states, and ten copies made the
// compile ten times slower; ParseSkeleton renumbers and keeps MaxPoints.
func SkeletonRegex() string {
	const text = `[^\n]{1,40}`
	return " " + text + `(\n[0-9]{1,2}\. ` + text + `)+\n?`
}

func cloneMessages(ms []Message) []Message {
	return append(make([]Message, 0, len(ms)+1), ms...)
}
