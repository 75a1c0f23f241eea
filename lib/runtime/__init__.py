"""How a function runs: work deferred past the response, and the AWS Lambda adapter."""
