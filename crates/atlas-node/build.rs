//! Link flags of a Node-API module (napi-rs's build support).

fn main() {
    napi_build::setup();
}
