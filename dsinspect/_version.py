"""The package version: its own module so the engine can stamp it into manifests without importing the
package root."""

__version__ = "0.1.0"
