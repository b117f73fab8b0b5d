// Package problem reports configuration problems by field path
// ("auth.issuer: required"), so that each component states its rules once:
// its constructor reports them under its own field names, and the gateway's
// config check reports the same problems under the section of the config
// file that holds the component's settings, every one at once.
package problem

import (
	"errors"
	"fmt"
	"strings"
)

// At reports problems found under one field path into a list. Its zero
// value drops what it is given.
type At struct {
	list *[]string
	path string
}

// Into returns an At that appends "path.field: message" to list; path ""
// is the top of the document.
func Into(list *[]string, path string) At { return At{list: list, path: path} }

// Add reports a problem with field (relative to a's path; "" is the path
// itself).
func (a At) Add(field, format string, args ...any) {
	if a.list == nil {
		return
	}
	*a.list = append(*a.list, a.Name(field)+": "+fmt.Sprintf(format, args...))
}

// Name is field's full path, for a message that names another field.
func (a At) Name(field string) string {
	switch {
	case a.path == "":
		return field
	case field == "":
		return a.path
	case field[0] == '[':
		return a.path + field
	}
	return a.path + "." + field
}

// In is an At for a field under a's path.
func (a At) In(field string) At { return At{list: a.list, path: a.Name(field)} }

// Item is an At for element i of the list field.
func (a At) Item(field string, i int) At { return a.In(fmt.Sprintf("%s[%d]", field, i)) }

// NotNegative reports field when v is below zero: no count or duration of
// a config has a meaning there.
func NotNegative[T ~int | ~int64](a At, field string, v T) {
	if v < 0 {
		a.Add(field, "must not be negative, got %v", v)
	}
}

// NeedEnv reports field when the environment variable name, which holds
// a secret the setting names, is not set (getenv gives ""): a config is
// checked where it runs. An empty name is no variable, and no problem.
func NeedEnv(a At, field, name string, getenv func(string) string) {
	if name != "" && getenv(name) == "" {
		a.Add(field, "environment variable %s is not set", name)
	}
}

// Err is nil for no problems, else one error for what (a component's name)
// that lists them all.
func Err(what string, list []string) error {
	if len(list) == 0 {
		return nil
	}
	return fmt.Errorf("%s: invalid config: %w", what, errors.New(strings.Join(list, "; ")))
}

// Errors is list as errors, one a problem, for a constructor that joins
// its errors with errors.Join.
func Errors(list []string) []error {
	errs := make([]error, 0, len(list))
	for _, s := range list {
		errs = append(errs, errors.New(s))
	}
	return errs
}
