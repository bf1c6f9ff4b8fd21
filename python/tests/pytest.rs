//! Runs the Python package's tests (`python/tests/*.py`) with pytest from `cargo test`.
//!
//! The extension module is the `lib_apiary.so` cargo built for this test run; it is put
//! beside a copy of the package's Python sources in a temporary directory, so the tests
//! exercise exactly this build. The interpreter and packages come from `python/.venv`
//! (`bash python/setup.sh` makes it, pinned); without it this test fails and says so.
//! `maturin build --release -m python/Cargo.toml` packages the same library as a wheel.

use std::path::PathBuf;
use std::process::Command;

fn python_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The extension module cargo built for this test: `lib_apiary.so` beside this test's
/// executable (`target/<profile>/deps`; the library is a dependency of this test, so it is
/// built with it and not copied up to `target/<profile>`).
fn extension_module() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let name = if cfg!(target_os = "macos") { "lib_apiary.dylib" } else { "lib_apiary.so" };
    exe.parent().expect("target/<profile>/deps").join(name)
}

#[test]
fn pytest_suite() {
    let python = python_dir().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash python/setup.sh` first (it installs pytest, pyarrow, pandas, polars)",
        python.display()
    );
    let module = extension_module();
    assert!(module.exists(), "{} is missing: cargo should have built the apiary-python library", module.display());

    let package = std::env::temp_dir().join(format!("apiary-pytest-{}", std::process::id()));
    let target = package.join("apiary");
    std::fs::create_dir_all(&target).expect("temporary package directory");
    for entry in std::fs::read_dir(python_dir().join("apiary")).expect("python/apiary") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "py" || e == "typed") {
            std::fs::copy(&path, target.join(path.file_name().unwrap())).expect("copy a source file");
        }
    }
    std::fs::copy(&module, target.join("_apiary.abi3.so")).expect("copy the extension module");

    // Run from the temporary directory: `python -m` puts the working directory first on
    // the module path, and `python/` itself holds the sources without a built module.
    let status = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(python_dir().join("tests"))
        .current_dir(&package)
        .env("PYTHONPATH", &package)
        // The package under test, not an installed one.
        .env("PYTHONNOUSERSITE", "1")
        .env("APIARY_EXPECT_MODULE", target.join("_apiary.abi3.so"))
        .status()
        .expect("run pytest");
    let _ = std::fs::remove_dir_all(&package);
    assert!(status.success(), "pytest failed (see its output above)");
}
