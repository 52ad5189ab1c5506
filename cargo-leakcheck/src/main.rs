fn main() {
    std::process::exit(cargo_leakcheck::main_impl());
}
