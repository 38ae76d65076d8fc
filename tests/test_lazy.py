"""dsinspect.lazy: a package's names load on first use, from the module that holds them, once."""

import subprocess
import sys
import textwrap


def run(tmp_path, code: str) -> str:
    """`code` in a fresh interpreter that sees a small package `pkg` whose names are lazy."""
    pkg = tmp_path / "pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        from dsinspect.lazy import lazy_names as _lazy_names
        __all__ = ["heavy_value", "other"]
        __getattr__, __dir__ = _lazy_names(__name__, {".heavy": ("heavy_value",), "pkg.other_mod": ("other",)})
    """))
    (pkg / "heavy.py").write_text("heavy_value = 42\n")
    (pkg / "other_mod.py").write_text("other = 'x'\n")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
                          text=True, check=True)
    return done.stdout.split()


def test_a_name_loads_its_module_on_first_use_only(tmp_path):
    out = run(tmp_path, """
        import sys, pkg
        print("pkg.heavy" in sys.modules)
        print(pkg.heavy_value, "pkg.heavy" in sys.modules, "pkg.other_mod" in sys.modules)
        print("heavy_value" in vars(pkg))  # stored: the next lookup is a plain attribute
        print(pkg.other)
    """)
    assert out == ["False", "42", "True", "False", "True", "x"]


def test_unknown_names_and_dir(tmp_path):
    out = run(tmp_path, """
        import pkg
        print(sorted(set(dir(pkg)) & {"heavy_value", "other"}) == ["heavy_value", "other"])
        try:
            pkg.nothing_here
        except AttributeError as e:
            print(str(e).replace(" ", "_"))
    """)
    assert out == ["True", "module_'pkg'_has_no_attribute_'nothing_here'"]
