// Package prompt owns the prompt bound: a byte scan of a request body that
// returns, without decoding or allocating, a number of tokens provably at
// least what the backend will count for its prompt (Scanner.Bound has the
// proof and its premises). How a body reaches the model is each
// operation's to say (Body, the operations table's prompt column), so
// budgets, which reserve the bound, and the request decoder, which owns
// the table, both depend on this leaf package and not on each other
// (request once imported budget for its body formats).
package prompt
