// Command deepinfer-health reads Kubernetes objects (one JSON object per line on stdin) and
// prints, for each, one JSON line: what kstatus (sigs.k8s.io/cli-utils, the library Flux and
// Helm read resources with) computes, and what an Argo CD health check (a Lua file named on the
// command line) returns when run as Argo CD runs it, under gopher-lua with the object as `obj`.
// The test bed builds it; the tests compare both readings with docs/gitops.md.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type reading struct {
	Kstatus        string `json:"kstatus"`
	KstatusMessage string `json:"kstatusMessage"`
	Argocd         string `json:"argocd,omitempty"`
	ArgocdMessage  string `json:"argocdMessage,omitempty"`
	Error          string `json:"error,omitempty"`
}

func main() {
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: deepinfer-health [HEALTH.lua] < objects.jsonl")
		os.Exit(2)
	}
	var script string
	if len(os.Args) == 2 {
		b, err := os.ReadFile(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		script = string(b)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		var r reading
		var obj map[string]interface{}
		// As the API machinery decodes: integers as int64, as kstatus expects them.
		if err := utiljson.Unmarshal(in.Bytes(), &obj); err != nil {
			r.Error = err.Error()
		} else {
			r = read(obj, script)
		}
		if err := out.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func read(obj map[string]interface{}, script string) reading {
	var r reading
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Kstatus, r.KstatusMessage = res.Status.String(), res.Message
	if script == "" {
		return r
	}
	r.Argocd, r.ArgocdMessage, err = health(obj, script)
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// health runs an Argo CD health script as Argo CD does: a fresh Lua state, the object as the
// global `obj`, and the table the script returns read for `status` and `message`.
func health(obj map[string]interface{}, script string) (string, string, error) {
	l := lua.NewState()
	defer l.Close()
	l.SetGlobal("obj", value(l, obj))
	if err := l.DoString(script); err != nil {
		return "", "", err
	}
	t, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the health script returned %s, not a table", l.Get(-1).Type())
	}
	return lua.LVAsString(t.RawGetString("status")), lua.LVAsString(t.RawGetString("message")), nil
}

// value converts a decoded JSON value into Lua: objects and arrays become tables, numbers
// numbers; JSON null is an absent key, as in Argo CD.
func value(l *lua.LState, v interface{}) lua.LValue {
	switch v := v.(type) {
	case map[string]interface{}:
		t := l.NewTable()
		for k, e := range v {
			if e != nil {
				t.RawSetString(k, value(l, e))
			}
		}
		return t
	case []interface{}:
		t := l.NewTable()
		for _, e := range v {
			t.Append(value(l, e))
		}
		return t
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	default:
		return lua.LNil
	}
}
