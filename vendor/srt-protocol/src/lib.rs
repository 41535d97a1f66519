pub mod access;
pub mod connection;
pub mod listener;
pub mod options;
pub mod packet;
pub mod protocol;
pub mod settings;
pub mod statistics;
