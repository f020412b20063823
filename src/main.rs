fn main() {
    println!("tune: under construction");
}
