// Result<T>: a value or an ApiError. API code returns errors the caller
// handles (docs/architecture/contract.md, "Errors and exit codes"); nothing under
// operator/ throws across a reconcile.
// ApiError carries the HTTP status (0 = transport failure) and the reason
// from the API server's Status object, and sorts itself into the three error
// classes the controller acts on: not-found (drop), transient (requeue with
// backoff) and everything else (terminal for the caller to report).
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace weft::kube {

struct ApiError {
  int status = 0;        // HTTP status; 0 = transport failure or timeout
  std::string reason;    // metav1.Status reason, e.g. "NotFound", "Conflict"
  std::string message;   // human-readable, names the request

  bool not_found() const { return status == 404; }
  bool conflict() const { return status == 409 && reason != "AlreadyExists"; }
  bool already_exists() const { return status == 409 && reason == "AlreadyExists"; }
  bool gone() const { return status == 410; }
  // Worth retrying later: transport errors, throttling, server errors and
  // optimistic-concurrency conflicts (a newer object exists; re-read it).
  bool transient() const { return status == 0 || status == 429 || status >= 500 || conflict() || gone(); }
};

template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit on purpose
  Result(ApiError error) : v_(std::move(error)) {}     // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const ApiError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace weft::kube
