package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/structured/toolcall"
)

// TestOpenAINpmTools starts a server per tool-calling family (the family's real chat
// template, replies scripted through Config.ToolGrammar) and runs test/openai/tools.test.mjs
// and responses_tools.test.mjs: the official openai npm client sends tools and checks the
// tool_calls (chat) and function_call items (Responses) it gets, streamed and not. It also
// starts a server per parser on the tiny random model with the built-in grammar and runs
// tools_required.test.mjs: tool_choice "required" and a named function, streamed and not,
// must end in calls with schema-valid arguments. It skips only when node or npm is missing
// and KVASIR_REQUIRE_TESTDATA is unset.
func TestOpenAINpmTools(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type server struct {
		scriptedFamily
		BaseURL string `json:"baseURL"`
		Model   string `json:"model"`
	}
	type randomServer struct {
		Name    string `json:"name"`
		BaseURL string `json:"baseURL"`
		Model   string `json:"model"`
	}
	var servers []server
	var random []randomServer
	node, dir := openAIClient(t, ctx, func(string) {
		for _, f := range scriptedFamilies {
			env := scriptedServer(t, f, "")
			servers = append(servers, server{scriptedFamily: f, BaseURL: env.ts.URL + "/v1", Model: testModelName})
		}
		for _, parser := range toolcall.Names() {
			env := randomToolServer(t, parser, nil)
			random = append(random, randomServer{Name: parser, BaseURL: env.ts.URL + "/v1", Model: testModelName})
		}
	})
	randomList, err := json.Marshal(random)
	if err != nil {
		t.Fatal(err)
	}
	list, err := json.Marshal(servers)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := json.Marshal(testTools())
	if err != nil {
		t.Fatal(err)
	}
	test := exec.CommandContext(ctx, node, "--test", "tools.test.mjs", "responses_tools.test.mjs", "tools_required.test.mjs")
	test.Dir = dir
	test.Env = append(os.Environ(), "KVASIR_TOOL_SERVERS="+string(list), "KVASIR_TOOLS="+string(tools), "KVASIR_REQUIRED_SERVERS="+string(randomList))
	out, err := test.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, tail(out, 12000))
	}
	t.Logf("openai client tool tests passed on %d scripted families and %d parsers' grammars (%s)", len(servers), len(random), summary(out))
}
